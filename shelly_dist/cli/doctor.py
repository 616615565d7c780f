"""``shelly doctor``: can this config's pool run work? One line per check, and what to do.

The checks live in :mod:`shelly_dist.engine.diagnostics`; this command renders them (or prints
them as one JSON object with ``--json``) and turns them into an exit code: 0 when nothing failed
(warnings allowed), 1 when the pool cannot run work, 2 when the config itself does not load.
"""

from __future__ import annotations

import json
import sys

import click

from shelly_dist.cli.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, run_async
from shelly_dist.cli.options import config_options, json_option
from shelly_dist.engine.diagnostics import DEFAULT_TIMEOUT, FAIL, OK, WARN, Check, diagnose

_COLOURS = {OK: "green", WARN: "yellow", FAIL: "red"}


def render(check: Check) -> str:
    """``ok    redis  Redis 7.2 at …`` and, for a warning or failure, an indented ``→ fix`` line."""
    status = click.style(f"{check.status:<5}", fg=_COLOURS.get(check.status), bold=check.status != OK)
    line = f"{status} {check.name}: {check.detail}"
    if check.fix and check.status != OK:
        line += f"\n      → {check.fix}"
    return line


@click.command("doctor")
@config_options
@json_option
@click.option("--timeout", type=float, default=DEFAULT_TIMEOUT, show_default=True,
              help="Seconds each probe (a connection, the workers' replies) may take.")
def doctor_command(config_path: str | None, shelly_dir: str, as_json: bool, timeout: float) -> None:
    """Check the config, Redis, the broker and the workers on the queue."""
    diagnosis = run_async(diagnose(config_path, shelly_dir, seconds=timeout))
    if as_json:
        click.echo(json.dumps(diagnosis.as_json(), ensure_ascii=False))
    else:
        for check in diagnosis.checks:
            click.echo(render(check))
    if diagnosis.config_failed:
        sys.exit(EXIT_USAGE)
    sys.exit(EXIT_OK if diagnosis.ok else EXIT_FAILED)
