"""``shelly agents``: the config's agents as a table (or ``--json``), without starting anything."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from shelly_dist.cli.errors import fail
from shelly_dist.cli.options import config_options, json_option
from shelly_dist.engine import Config, find_config, load_config
from shelly_dist.errors import ShellyError


def load(config_path: str | None, shelly_dir: str) -> Config:
    """The validated config, or exit 2 with the field named."""
    try:
        return load_config(find_config(config_path, shelly_dir))
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
    ]


@click.command("agents")
@config_options
@json_option
def agents_command(config_path: str | None, shelly_dir: str, as_json: bool) -> None:
    """List the configured agents."""
    rows = describe(load(config_path, shelly_dir))
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
