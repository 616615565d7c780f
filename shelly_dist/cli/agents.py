"""``shelly agents``: the config's agents as a table (or ``--json``), without starting anything.

``--check`` validates instead: the config and the skills its agents list, printing one line per
warning (unknown key, skill with no folder, MCP server shadowed by a built-in) and one per Python
tool an agent gets from the modules of ``python:``, and exiting 0, or 2 under
``--strict``/``SHELLY_STRICT_CONFIG=1`` when there is any warning.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from shelly_dist.cli.errors import fail
from shelly_dist.cli.options import config_options, json_option
from shelly_dist.engine import Config, find_config, load_config
from shelly_dist.engine.agents import config_warnings
from shelly_dist.engine.config import report
from shelly_dist.engine.extensions import python_tools
from shelly_dist.engine.shellydir import ShellyDir
from shelly_dist.errors import ShellyError
from shelly_dist.skills import SkillStore, load_skills


def load(config_path: str | None, shelly_dir: str) -> Config:
    """The validated config, or exit 2 with the field named."""
    try:
        return load_config(find_config(config_path, shelly_dir))
    except ShellyError as exc:
        fail(exc)


def warnings_of(cfg: Config, shelly_dir: str) -> list[str]:
    """Every config warning, skills included; under strict mode, exit 2 instead."""
    sd = ShellyDir(Path(shelly_dir))
    skills = SkillStore(load_skills(sd.skills) if sd.skills.is_dir() else [])
    try:
        return config_warnings(cfg, skills)
    except ShellyError as exc:
        fail(exc)


def describe(cfg: Config) -> list[dict[str, Any]]:
    """One object per agent: name, provider, toolboxes, description, entry."""
    entry = cfg.entry().name
    return [
        {
            "name": a.name,
            "provider": cfg.provider_for(a).name,
            "toolboxes": a.toolbox_names(),
            "description": a.description,
            "entry": a.name == entry,
        }
        for a in cfg.agents
    ] + [
        {"name": t.name, "provider": t.coordinator.provider, "toolboxes": [], "description": t.description,
         "entry": t.name == cfg.entry_agent, "team": t.members, "coordinator": t.coordinator.kind}
        for t in cfg.teams
    ]


@click.command("agents")
@config_options
@json_option
@click.option("--check", is_flag=True, help="Validate the config and skills; print each warning.")
def agents_command(config_path: str | None, shelly_dir: str, as_json: bool, check: bool) -> None:
    """List the configured agents."""
    cfg = load(config_path, shelly_dir)
    warnings = warnings_of(cfg, shelly_dir)
    if check:
        tools = {a.name: python_tools(a) for a in cfg.agents}
        if as_json:
            click.echo(json.dumps({"agents": len(cfg.agents), "warnings": warnings, "python_tools": tools},
                                  ensure_ascii=False))
            return
        for line in warnings:
            click.echo(f"warning: {line}")
        for agent, found in tools.items():
            for name, origin in found.items():
                click.echo(f"python tool: {agent}: {name} ({origin})")
        click.echo(f"ok: {len(cfg.agents)} agents, {len(warnings)} warnings")
        return
    report(warnings)
    rows = describe(cfg)
    if as_json:
        click.echo(json.dumps(rows, ensure_ascii=False))
        return
    table = Table(header_style="bold")
    for column in ("name", "provider", "toolboxes", "description"):
        table.add_column(column)
    for r in rows:
        name = r["name"] + (" (entry)" if r["entry"] else "")
        table.add_row(name, r["provider"], ", ".join(r["toolboxes"]), r["description"])
    Console().print(table)
