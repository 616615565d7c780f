"""``shelly flower``: Flower on shelly's Celery app, authenticated unless told otherwise.

Flower shows the pool's side of things: workers, and each ``shelly.run_agent`` /
``shelly.resume_agent`` task with its agent, depth, session and task preview. Its UI and API
control workers, so it refuses to start without credentials unless ``--no-auth`` is given.
"""

from __future__ import annotations

import os
import sys

import click

from shelly_dist.cli.errors import fail
from shelly_dist.errors import UsageError


@click.command("flower", context_settings={"ignore_unknown_options": True})
@click.option("--port", type=int, default=5555, show_default=True)
@click.option("--address", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--basic-auth", default=None, help="user:password (default $FLOWER_BASIC_AUTH).")
@click.option("--no-auth", is_flag=True, help="Serve without authentication (trusted networks only).")
@click.option("--config", "config_path", default=None)
@click.option("--shelly-dir", default=".shelly", show_default=True)
@click.argument("flower_args", nargs=-1, type=click.UNPROCESSED)
def flower_command(
    port: int, address: str, basic_auth: str | None, no_auth: bool, config_path: str | None, shelly_dir: str,
    flower_args: tuple[str, ...],
) -> None:
    """Run Flower (extra arguments go to Flower)."""
    auth = basic_auth or os.environ.get("FLOWER_BASIC_AUTH", "")
    if not auth and not no_auth:
        fail(UsageError("flower: authentication is required: pass --basic-auth user:password, set "
                        "FLOWER_BASIC_AUTH, or --no-auth on a trusted network"))
    if auth and ":" not in auth:
        fail(UsageError("flower: --basic-auth must be user:password"))
    if config_path:
        os.environ["SHELLY_CONFIG"] = os.path.abspath(config_path)
    os.environ["SHELLY_DIR"] = os.path.abspath(shelly_dir)
    argv = [sys.executable, "-m", "celery", "-A", "shelly_dist.runtime.celery_app", "flower",
            f"--port={port}", f"--address={address}", *flower_args]
    if auth:
        argv.append(f"--basic-auth={auth}")
    os.execv(sys.executable, argv)
