"""Cross-field rules of a config: the checks of Shelly's ``Validate`` plus ours.

Each rule yields ``(field path, problem)``; the loader turns them into one
:class:`~shelly_dist.errors.ConfigError` with one ``config: <path>: <problem>`` line each, so a
user fixes every mistake in one pass. Paths use the YAML's shape: ``agents[1].provider``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from shelly_dist.engine.config_models import (
    BUILTIN_TOOLBOXES,
    EFFECT_KINDS,
    ESTIMATED_COSTS,
    INTERACTION_MODES,
    PROVIDER_KINDS,
    AgentConfig,
    Config,
    ProviderConfig,
)
from shelly_dist.extensions import REGISTRY

Problem = tuple[str, str]


def _duplicates(kind: str, section: str, names: list[str]) -> Iterator[Problem]:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            yield f"{section}[{i}].name", f'duplicate {kind} name "{name}"'
        seen.add(name)


def _one_of(values: tuple[str, ...]) -> str:
    return ", ".join(f'"{v}"' for v in values if v)


def _provider_problems(cfg: Config) -> Iterator[Problem]:
    if not cfg.providers:
        yield "providers", "at least one provider is required"
    names = {p.name for p in cfg.providers}
    agents = {a.name for a in cfg.agents} | {t.name for t in cfg.teams}
    yield from _duplicates("provider", "providers", [p.name for p in cfg.providers])
    for i, p in enumerate(cfg.providers):
        at = f"providers[{i}]"
        kinds = (*PROVIDER_KINDS, *sorted(REGISTRY.providers))  # + the @provider kinds of python:
        if p.kind not in kinds:
            yield f"{at}.kind", f'unknown provider kind "{p.kind}" (one of {_one_of(kinds)})'
        if p.context_window is not None and p.context_window < 0:
            yield f"{at}.context_window", "must not be negative"
        if p.max_tokens is not None and p.max_tokens <= 0:
            yield f"{at}.max_tokens", "must be greater than 0"
        for j, fb in enumerate(p.fallback):
            if fb == p.name:
                yield f"{at}.fallback[{j}]", "a provider cannot fall back to itself"
            elif fb not in names:
                yield f"{at}.fallback[{j}]", f'unknown provider "{fb}"'
        if p.script and p.kind != "scripted":
            yield f"{at}.script", 'only a provider of kind "scripted" takes a script'
        for agent in p.script:
            if agent != "*" and agent not in agents:
                yield f"{at}.script.{agent}", f'unknown agent "{agent}"'
        yield from _batch_problems(at, p)
    for kind, window in cfg.default_context_windows.items():
        if window < 0:
            yield f"default_context_windows.{kind}", "must not be negative"


BATCH_KINDS = {"openai": ("openai", "grok"), "anthropic": ("anthropic",)}
"""Provider kinds whose completer writes the requests each batch API takes."""


def _batch_problems(at: str, p: ProviderConfig) -> Iterator[Problem]:
    if p.batch is None or not p.batch.enabled:
        return
    if p.kind == "gemini":  # as Shelly: engine.buildBatchSubmitter refuses it
        yield f"{at}.batch.enabled", ('batch is not supported for provider kind "gemini" (as in Shelly); '
                                      "set enabled: false")
    elif p.batch.api and p.kind not in BATCH_KINDS[p.batch.api]:
        yield f"{at}.batch.api", (f'"{p.batch.api}" needs a provider of kind '
                                  f'{" or ".join(BATCH_KINDS[p.batch.api])}, not "{p.kind}"')


def _batch_leniency(at: str, p: ProviderConfig) -> Problem | None:
    """Why a provider's ``batch.enabled`` has no effect (its calls go direct), or ``None``."""
    if p.batch is None or not p.batch.enabled or p.batch_api() is not None or p.kind == "gemini":
        return None
    if p.kind == "grok":
        why = ("xAI's Batch API takes OpenAI's upload but answers status and results in shapes of its own, "
               "which shelly-dist does not read yet")
    elif p.kind == "openai":
        why = (f"{p.base_url} is not OpenAI's API: set batch.api: openai if that server implements OpenAI's "
               "/v1/files and /v1/batches")
    else:
        why = f'provider kind "{p.kind}" has no batch API'
    return f"{at}.batch.enabled", f"{why}; its model calls go direct, at the interactive price"


def _mcp_problems(cfg: Config) -> Iterator[Problem]:
    yield from _duplicates("MCP server", "mcp_servers", [m.name for m in cfg.mcp_servers])
    for i, m in enumerate(cfg.mcp_servers):
        at = f"mcp_servers[{i}]"
        if bool(m.command) == bool(m.url):
            yield at, "exactly one of command or url is required"
        if m.name in OWN_TOOLBOXES:
            yield f"{at}.name", (f'"{m.name}" is the name of the built-in {m.name} toolbox (docs/workflows.md): '
                                 "rename the MCP server")


OWN_TOOLBOXES = ("team",)
"""Built-in toolboxes Go Shelly does not have: an MCP server of that name is an error, not the Go
leniency of :func:`shadowed_mcp_servers` (no Go config can hold one, and the server would be
silently ignored)."""


AGENT_NAME_REFUSED = re.compile(r"[\s{}\x00-\x1f\x7f]")
"""What an agent name may not hold: whitespace or control characters (it is a word in prompts, tool
names and log lines) and braces (a Redis hash tag in the pool's keys: such an agent failed every
claim on the pool, forever)."""


def _agent_problems(cfg: Config, i: int, a: AgentConfig) -> Iterator[Problem]:
    at = f"agents[{i}]"
    if AGENT_NAME_REFUSED.search(a.name):
        yield f"{at}.name", f"agent name {a.name!r} may not contain spaces, braces or control characters"
    if a.provider and cfg.provider(a.provider) is None:
        yield f"{at}.provider", f'unknown provider "{a.provider}"'
    toolboxes = set(BUILTIN_TOOLBOXES) | {m.name for m in cfg.mcp_servers} | set(REGISTRY.toolboxes)
    for j, name in enumerate(a.toolbox_names()):
        if name not in toolboxes:
            yield f"{at}.toolboxes[{j}]", (
                f'unknown toolbox "{name}" (a built-in, an MCP server name, or a toolbox of a module of python:)'
            )
    for j, effect in enumerate(a.effects):
        if effect.kind not in EFFECT_KINDS:
            yield f"{at}.effects[{j}].kind", f'unknown effect kind "{effect.kind}"'
    if a.effects:  # the effect classes (and the chat types under them) only for a config that has some
        from shelly_dist.engine.effects import effect_problems

        yield from effect_problems(i, a)
    if a.estimated_cost not in ESTIMATED_COSTS:
        yield f"{at}.estimated_cost", f"must be one of {_one_of(ESTIMATED_COSTS)}"
    if a.max_concurrency < 0:
        yield f"{at}.max_concurrency", "must not be negative"
    o = a.options
    if o.context_threshold != 0 and not 0 < o.context_threshold < 1:
        yield f"{at}.options.context_threshold", "must be 0 (default) or strictly between 0 and 1"
    if o.interaction_mode not in INTERACTION_MODES:
        yield f"{at}.options.interaction_mode", (
            f'invalid interaction_mode "{o.interaction_mode}" (one of {_one_of(INTERACTION_MODES)})'
        )
    if o.question_timeout is not None and o.question_timeout < 0:
        yield f"{at}.options.question_timeout", "invalid question_timeout: must not be negative"
    yield from _approval_problems(a, at)


def _approval_problems(a: AgentConfig, at: str) -> Iterator[Problem]:
    if a.approval is None:
        return
    if a.approval.timeout is not None and a.approval.timeout < 0:
        yield f"{at}.approval.timeout", "must not be negative"
    listed = set(a.toolbox_names()) | {"ask"}
    for j, pattern in enumerate(a.approval.tools):
        if not pattern or pattern in ("group:", "toolbox:"):
            yield f"{at}.approval.tools[{j}]", "an empty pattern gates nothing: name a tool, group:<g> or toolbox:<t>"
        elif pattern.startswith("toolbox:") and not any(ch in pattern for ch in "*?[") \
                and pattern.removeprefix("toolbox:") not in listed:
            yield f"{at}.approval.tools[{j}]", (
                f'toolbox "{pattern.removeprefix("toolbox:")}" is not one of this agent\'s toolboxes '
                f"({', '.join(sorted(listed))})")


def _distributed_problems(cfg: Config) -> Iterator[Problem]:
    d = cfg.distributed
    if d.visibility_timeout is not None and d.visibility_timeout <= 0:
        yield "distributed.visibility_timeout", "must be positive"
    lo = cfg.loop_detection
    if lo.warn_after is not None and lo.stop_after is not None and lo.warn_after >= lo.stop_after:
        yield "loop_detection.warn_after", "must be less than stop_after"


def shadowed_mcp_servers(cfg: Config) -> list[str]:
    """MCP servers named like a built-in toolbox. Go accepts them and its built-in wins (it
    wires the built-ins after connecting MCP servers, under the same name), so an agent listing
    the name gets the built-in; we do the same and do not start such a server at all."""
    return [m.name for m in cfg.mcp_servers if m.name in BUILTIN_TOOLBOXES and m.name not in OWN_TOOLBOXES]


def leniencies(cfg: Config) -> list[Problem]:
    """What a valid config does that Go accepts but is probably a mistake (warnings)."""
    out: list[Problem] = [found for i, p in enumerate(cfg.providers)
                          if (found := _batch_leniency(f"providers[{i}]", p)) is not None]
    for i, m in enumerate(cfg.mcp_servers):
        if m.name in BUILTIN_TOOLBOXES and m.name not in OWN_TOOLBOXES:
            out.append((
                f"mcp_servers[{i}].name",
                f'"{m.name}" is a built-in toolbox: agents listing "{m.name}" get the built-in one '
                "(as in Shelly), so this server is not started",
            ))
    return out


def _team_problems(cfg: Config) -> list[Problem]:
    """Teams: unique names apart from the agents', known members, no team inside itself, a
    known provider for an LLM coordinator."""
    out = list(_duplicates("team", "teams", [t.name for t in cfg.teams]))
    agents = {a.name for a in cfg.agents} | {r.name for r in cfg.a2a_agents}
    teams = {t.name: t for t in cfg.teams}
    for i, t in enumerate(cfg.teams):
        at = f"teams[{i}]"
        if t.name in agents:
            out.append((f"{at}.name", f'"{t.name}" is also an agent'))
        for j, m in enumerate(t.members):
            if m not in agents and m not in teams:
                out.append((f"{at}.members[{j}]", f'unknown agent or team "{m}"'))
        if _contains(teams, t.name, t.name, set()):
            out.append((f"{at}.members", f'team "{t.name}" contains itself'))
        c = t.coordinator
        if c.kind == "llm" and cfg.provider(c.provider) is None:
            out.append((f"{at}.coordinator.provider", f'unknown provider "{c.provider}"'))
    return out


def _contains(teams: dict, name: str, wanted: str, seen: set[str]) -> bool:
    team = teams.get(name)
    if team is None or name in seen:
        return False
    seen.add(name)
    return any(m == wanted or _contains(teams, m, wanted, seen) for m in team.members)


def problems(cfg: Config) -> list[Problem]:
    """Every rule violation of ``cfg``, in file order. Empty means valid."""
    out = list(_provider_problems(cfg))
    out += _mcp_problems(cfg)
    if not cfg.agents:
        out.append(("agents", "at least one agent is required"))
    out += _duplicates("agent", "agents", [a.name for a in cfg.agents])
    for i, a in enumerate(cfg.agents):
        out += _agent_problems(cfg, i, a)
    out += _team_problems(cfg)
    if cfg.entry_agent and cfg.agent(cfg.entry_agent) is None and cfg.team(cfg.entry_agent) is None:
        out.append(("entry_agent", f'unknown agent "{cfg.entry_agent}"'))
    out += _distributed_problems(cfg)
    out += _duplicates("A2A agent", "a2a_agents", [r.name for r in cfg.a2a_agents])
    local = {a.name for a in cfg.agents}
    out += [(f"a2a_agents[{i}].name", f'"{r.name}" is also a local agent') for i, r in enumerate(cfg.a2a_agents)
            if r.name in local]
    return out
