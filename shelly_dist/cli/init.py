"""``shelly init``: create a ``.shelly/`` directory from a bundled template."""

from __future__ import annotations

from pathlib import Path

import click

from shelly_dist.cli.errors import fail
from shelly_dist.engine import bootstrap, list_templates
from shelly_dist.engine.shellydir import DEFAULT_TEMPLATE
from shelly_dist.errors import UsageError


@click.command("init")
@click.option("--shelly-dir", default=".shelly", show_default=True, help="Where to create the directory.")
@click.option("--template", default=DEFAULT_TEMPLATE, show_default=True, help="Template name (see --list).")
@click.option("--force", is_flag=True, help="Overwrite existing files with the template's.")
@click.option("--list", "list_only", is_flag=True, help="List the templates and exit.")
def init_command(shelly_dir: str, template: str, force: bool, list_only: bool) -> None:
    """Create .shelly/ (config, context, skills) from a template; existing files are kept."""
    if list_only:
        for name, description in list_templates():
            click.echo(f"{name:<18} {description}")
        return
    try:
        written = bootstrap(shelly_dir, template, force=force)
    except (UsageError, OSError) as exc:
        fail(exc if isinstance(exc, UsageError) else UsageError(f"init: {exc}"))
    root = Path(shelly_dir)
    for path in written:
        click.echo(f"created {path}", err=True)
    if not written:
        click.echo(f"{root}: every file already exists (use --force to overwrite)", err=True)
        return
    hint = "shelly run" if str(root) == ".shelly" else f"shelly run --shelly-dir {root}"
    click.echo(f'Initialised {root} from template "{template}". Try: {hint} "your task"', err=True)
