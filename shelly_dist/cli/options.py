"""Options several commands share (``--config``, ``--shelly-dir``, ``--session``, ``--json``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click

from shelly_dist.engine.config import ENV_STRICT

F = Callable[..., Any]


def _strict(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``--strict`` sets ``SHELLY_STRICT_CONFIG=1`` for this process and the ones it starts."""
    if value:
        os.environ[ENV_STRICT] = "1"


def strict_option(f: F) -> F:
    """``--strict``: config warnings are errors (sets ``SHELLY_STRICT_CONFIG=1``)."""
    return click.option(
        "--strict", is_flag=True, expose_value=False, is_eager=True, callback=_strict,
        help=f"Config warnings (unknown keys, missing skills) are errors; same as {ENV_STRICT}=1.",
    )(f)


def config_options(f: F) -> F:
    """``--config P``, ``--shelly-dir D`` (default ``.shelly``) and ``--strict``."""
    f = strict_option(f)
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
