"""``shelly index``: build or refresh the project's knowledge graph in ``.shelly/`` (Go Shelly's).

It runs the ``project-indexer`` team (the template of that name: an index lead and explorers on
the task board) on the task Shelly gives it, so ``.shelly/context.md`` gets a concise overview
and ``.shelly/knowledge/`` one file per area. The template's skill is written into
``.shelly/skills/`` when missing, never over the user's. ``--config`` runs another copy of the
team (for example ``shelly init --template project-indexer`` edited to another provider).

``--check`` only reports: exit 1 with "Knowledge graph is stale." when ``context.md`` is missing
or older than the last git commit, else exit 0 (git errors count as fresh, as in Shelly).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from shelly_dist.cli.errors import fail
from shelly_dist.cli.options import json_option, strict_option
from shelly_dist.cli.run import run_and_print
from shelly_dist.engine import is_knowledge_stale, load_config, parse_config
from shelly_dist.engine.config_models import Config
from shelly_dist.engine.shellydir import ShellyDir, template_config, template_skill_files
from shelly_dist.errors import ShellyError, UsageError

TEMPLATE = "project-indexer"
TASK = "Index this project. Build or update the knowledge graph in .shelly/."


def indexer_config(config_path: str | None) -> Config:
    """The team to run: ``--config``, else the bundled ``project-indexer`` template."""
    if config_path:
        return load_config(config_path)
    return parse_config(template_config(TEMPLATE), source=f"template {TEMPLATE}")


def write_missing_skills(sd: ShellyDir) -> list[Path]:
    """Write the template's skills that ``.shelly/skills/`` lacks; return what was written."""
    written = []
    for rel, text in template_skill_files(TEMPLATE):
        path = sd.root / rel
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


@click.command("index")
@click.option("--shelly-dir", default=".shelly", show_default=True, help="The .shelly directory.")
@click.option("--config", "config_path", default=None, help="Run this indexer config instead of the template.")
@click.option("--check", is_flag=True, help="Only check whether the knowledge graph is stale (exit 1 if so).")
@json_option
@strict_option
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
def index_command(shelly_dir: str, config_path: str | None, check: bool, as_json: bool, quiet: bool) -> None:
    """Build or update the project knowledge graph (.shelly/context.md and .shelly/knowledge/)."""
    sd = ShellyDir(Path(shelly_dir))
    if check:
        if is_knowledge_stale(sd.project_root, sd.root):
            click.echo("Knowledge graph is stale. Run 'shelly index' to refresh.")
            sys.exit(1)
        click.echo("Knowledge graph is up to date.")
        return
    if not sd.exists():
        fail(UsageError(f"index: .shelly/ directory not found at {shelly_dir} (run 'shelly init' first)"))
    try:
        cfg = indexer_config(config_path)
        cfg.allow_knowledge_writes()  # the one command whose tools write .shelly/context.md and knowledge/
        write_missing_skills(sd)
    except (ShellyError, OSError) as exc:
        fail(exc if isinstance(exc, ShellyError) else UsageError(f"index: {exc}"))
    run_and_print(
        TASK, agent=None, config_path=cfg, shelly_dir=shelly_dir, session_id=None, quiet=quiet, as_json=as_json,
        may_ask=True,
    )
