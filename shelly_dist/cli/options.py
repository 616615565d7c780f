"""Options several commands share (``--config``, ``--shelly-dir``, ``--session``, ``--json``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

F = Callable[..., Any]


def config_options(f: F) -> F:
    """``--config P`` and ``--shelly-dir D`` (default ``.shelly``)."""
    f = click.option("--shelly-dir", default=".shelly", show_default=True, help="The .shelly directory.")(f)
    help_text = "Config file (default: <shelly-dir>/config.yaml)."
    return click.option("--config", "config_path", default=None, help=help_text)(f)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")(f)


def session_option(f: F) -> F:
    return click.option("--session", "session_id", required=True, help="The session id (16 hex characters).")(f)


def session_scoped(f: F) -> F:
    """``--session`` plus the config options: what every ``state``/``tasks`` command takes."""
    return session_option(config_options(f))
