"""``shelly config``: Shelly's config wizard, as questions on the terminal.

It walks the providers, the agents, the entry agent and the distributed section, starting from the
existing ``.shelly/config.yaml`` when there is one (its other keys are kept as they are), and
writes the file only once the result passes the same validation ``shelly run`` applies. It never
writes a secret: an API key is asked for as the *name* of the environment variable that holds it
and written as ``${NAME}``; a value that looks like a key, or a Redis/broker URL with a password in
it, is refused and asked again (a URL with a password goes in a variable too: ``${REDIS_URL}``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click
import yaml

from shelly_dist.cli.errors import fail
from shelly_dist.cli.options import config_options

KINDS = {
    "anthropic": ("claude-opus-4-6", "ANTHROPIC_API_KEY"),
    "openai": ("gpt-5.4", "OPENAI_API_KEY"),
    "grok": ("grok-4-1-fast", "GROK_API_KEY"),
    "gemini": ("gemini-2.5-pro", "GEMINI_API_KEY"),
}
"""Each kind's default model and key variable (those of ``shelly init``'s templates)."""

VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
PASSWORD_IN_URL = re.compile(r"^[a-z][a-z0-9+.-]*://[^/@]*:[^/@]+@", re.IGNORECASE)
TOOLBOXES = ("state", "tasks", "filesystem", "exec", "search", "git", "http", "notes")


def variable(answer: str) -> str:
    """``answer`` as an environment variable's name (``NAME`` or ``${NAME}``); ``click.BadParameter``
    for anything else, which is how a pasted key is refused."""
    answer = answer.strip()
    match = REFERENCE.fullmatch(answer)
    name = match.group(1) if match else answer
    if not VARIABLE.fullmatch(name):
        raise click.BadParameter("give the NAME of the environment variable that holds the key (e.g. "
                                 "ANTHROPIC_API_KEY), never the key itself: the file must hold no secret")
    return name


def url_or_reference(answer: str) -> str:
    """A URL without a password, or a ``${VAR}`` reference (``click.BadParameter`` otherwise)."""
    answer = answer.strip()
    if REFERENCE.fullmatch(answer):
        return answer
    if PASSWORD_IN_URL.match(answer):
        raise click.BadParameter("this URL holds a password: put it in an environment variable and "
                                 "answer ${THAT_VARIABLE}")
    return answer


def ask_provider(taken: set[str]) -> dict[str, Any]:
    kind = click.prompt("Provider kind", type=click.Choice(sorted(KINDS)), default="anthropic")
    model, key = KINDS[kind]
    name = click.prompt("Provider name", default=kind if kind not in taken else f"{kind}-2")
    while name in taken:
        name = click.prompt(f"Provider {name!r} exists; another name")
    provider: dict[str, Any] = {"name": name, "kind": kind, "model": click.prompt("Model", default=model)}
    base_url = click.prompt("Base URL (empty: the vendor's)", default="", show_default=False)
    if base_url:
        provider["base_url"] = base_url
    provider["api_key"] = "${" + click.prompt("Environment variable holding the API key", default=key,
                                               value_proc=variable) + "}"
    if not click.confirm("Stream replies when a person watches?", default=True):
        provider["stream"] = False
    return provider


def ask_agent(taken: set[str], providers: list[str]) -> dict[str, Any]:
    name = click.prompt("Agent name", default="assistant" if "assistant" not in taken else None)
    while name in taken:
        name = click.prompt(f"Agent {name!r} exists; another name")
    agent: dict[str, Any] = {"name": name, "description": click.prompt("Description", default=f"The {name}")}
    instructions = click.prompt("Instructions (empty: none)", default="", show_default=False)
    if instructions:
        agent["instructions"] = instructions
    agent["provider"] = click.prompt("Provider", type=click.Choice(providers), default=providers[0])
    boxes = click.prompt(f"Toolboxes, comma-separated ({', '.join(TOOLBOXES)}; empty: none)", default="",
                         show_default=False)
    chosen = [b.strip() for b in boxes.split(",") if b.strip()]
    if chosen:
        agent["toolboxes"] = chosen
    return agent


def ask_distributed(current: dict[str, Any]) -> dict[str, Any] | None:
    if not click.confirm("Run the agents' children on a worker pool (Celery + Redis)?",
                         default=bool(current.get("broker_url"))):
        return None
    redis_url = click.prompt("Redis URL (journals, boards; ${VAR} for one with a password)",
                             default=current.get("redis_url") or "redis://127.0.0.1:6379/0",
                             value_proc=url_or_reference)
    broker = click.prompt("Broker URL (${VAR} for one with a password)",
                          default=current.get("broker_url") or redis_url, value_proc=url_or_reference)
    queue = click.prompt("Queue", default=current.get("queue") or "shelly")
    return {**current, "redis_url": redis_url, "broker_url": broker, "queue": queue}


def wizard(data: dict[str, Any]) -> dict[str, Any]:
    """Ask the questions; return the config ``data`` updated (nothing written)."""
    providers: list[dict[str, Any]] = list(data.get("providers") or [])
    if providers:
        click.echo("Providers: " + ", ".join(f"{p.get('name')} ({p.get('kind')})" for p in providers))
    while not providers or click.confirm("Add a provider?", default=False):
        providers.append(ask_provider({str(p.get("name")) for p in providers}))
    agents: list[dict[str, Any]] = list(data.get("agents") or [])
    if agents:
        click.echo("Agents: " + ", ".join(str(a.get("name")) for a in agents))
    names = [str(p["name"]) for p in providers]
    while not agents or click.confirm("Add an agent?", default=False):
        agents.append(ask_agent({str(a.get("name")) for a in agents}, names))
    out = {**data, "providers": providers, "agents": agents}
    if len(agents) > 1:
        out["entry_agent"] = click.prompt("Entry agent (the one `shelly` talks to)",
                                          type=click.Choice([str(a["name"]) for a in agents]),
                                          default=data.get("entry_agent") or str(agents[0]["name"]))
    distributed = ask_distributed(dict(data.get("distributed") or {}))
    if distributed is not None:
        out["distributed"] = distributed
    else:
        out.pop("distributed", None)
    return out


@click.command("config")
@config_options
def config_command(config_path: str | None, shelly_dir: str) -> None:
    """Create or change .shelly/config.yaml with a few questions (keys as ${VAR} references)."""
    from shelly_dist.engine.config import parse_config

    path = Path(config_path) if config_path else Path(shelly_dir) / "config.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else {}
    except (OSError, yaml.YAMLError) as exc:
        fail(click.UsageError(f"config: {path}: cannot read it: {exc}"))
    if not isinstance(data, dict):
        fail(click.UsageError(f"config: {path}: not a mapping; fix or remove it first"))
    try:
        result = wizard(data)
    except click.Abort:
        click.echo("\nconfig: nothing written", err=True)
        raise SystemExit(130) from None
    text = yaml.safe_dump(result, sort_keys=False, allow_unicode=True)
    try:
        parse_config(text, env={}, source=str(path))  # the same schema `shelly run` reads it with
    except Exception as exc:
        fail(exc)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    click.echo(f"config: wrote {path} ({len(result['providers'])} providers, {len(result['agents'])} agents)")
