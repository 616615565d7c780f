"""``shelly flower``: Flower on shelly's Celery app, authenticated unless told otherwise.

Flower shows the pool's side of things: workers, and each ``shelly.run_agent`` /
``shelly.resume_agent`` task (listed as ``shelly.run_agent[<agent>]``) with its agent, depth,
session and task preview; a failed or canceled run's task is FAILURE with the reason. Its UI and
API control workers, so it refuses to start without credentials unless ``--no-auth`` is given, and
a config without a broker, or a broker that does not answer, is one ``shelly:`` line before
Flower starts.

The credentials never reach a command line, which every user of the machine can read (``ps``,
``/proc/PID/cmdline``): they come from ``SHELLY_FLOWER_BASIC_AUTH`` or ``FLOWER_BASIC_AUTH`` (or,
discouraged, ``--basic-auth``), and reach Flower in its environment as ``FLOWER_BASIC_AUTH``,
which Flower reads itself; its argv carries none.
"""

from __future__ import annotations

import os
import sys

import click

from shelly_dist.cli.errors import fail
from shelly_dist.errors import ShellyError, UsageError

AUTH_ENV = "SHELLY_FLOWER_BASIC_AUTH"
FLOWER_AUTH_ENV = "FLOWER_BASIC_AUTH"
"""The variable Flower itself reads its ``basic_auth`` option from."""


def _check_config(config_path: str | None, shelly_dir: str) -> None:
    """Load the config as Flower's process will, check it names a broker and that the broker
    answers, so a missing config or a broker that is wrong or down is one ``shelly:`` line here
    (exit 2, naming the setting), not a Flower that starts and shows nothing while Celery retries."""
    from shelly_dist.engine.config import find_config, load_config
    from shelly_dist.engine.config_runtime import runtime_settings

    try:
        settings = runtime_settings(load_config(find_config(config_path, shelly_dir)))
    except ShellyError as exc:
        fail(exc)
    from shelly_dist.runtime.celery.broker import create_app, ensure_broker

    try:
        ensure_broker(create_app(settings), retries=1)
    except Exception as exc:  # kombu's OperationalError, an OSError: explained (cli.explain)
        fail(exc)


@click.command("flower", context_settings={"ignore_unknown_options": True})
@click.option("--port", type=int, default=5555, show_default=True)
@click.option("--address", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--basic-auth", envvar=AUTH_ENV, show_envvar=True, default=None,
              help=f"user:password (default ${AUTH_ENV}, else ${FLOWER_AUTH_ENV}); prefer the environment: "
                   "ps shows command lines.")
@click.option("--no-auth", is_flag=True, help="Serve without authentication (trusted networks only).")
@click.option("--config", "config_path", default=None)
@click.option("--shelly-dir", default=".shelly", show_default=True)
@click.argument("flower_args", nargs=-1, type=click.UNPROCESSED)
def flower_command(
    port: int, address: str, basic_auth: str | None, no_auth: bool, config_path: str | None, shelly_dir: str,
    flower_args: tuple[str, ...],
) -> None:
    """Run Flower (extra arguments go to Flower)."""
    auth = basic_auth or os.environ.get(FLOWER_AUTH_ENV, "")
    if not auth and not no_auth:
        fail(UsageError(f"flower: authentication is required: set {AUTH_ENV}=user:password (or "
                        f"{FLOWER_AUTH_ENV}, or --basic-auth), or --no-auth on a trusted network"))
    if auth and ":" not in auth:
        fail(UsageError("flower: --basic-auth must be user:password"))
    _check_config(config_path, shelly_dir)
    env = dict(os.environ)
    if config_path:
        env["SHELLY_CONFIG"] = os.path.abspath(config_path)
    env["SHELLY_DIR"] = os.path.abspath(shelly_dir)
    env.pop(AUTH_ENV, None)
    if auth:
        env[FLOWER_AUTH_ENV] = auth
    else:
        env.pop(FLOWER_AUTH_ENV, None)
    argv = [sys.executable, "-m", "celery", "-A", "shelly_dist.runtime.celery_app", "flower",
            f"--port={port}", f"--address={address}", *flower_args]
    os.execve(sys.executable, argv, env)
