"""``shelly serve``: the control plane (REST and Server-Sent Events) and the web console, on one port.

With a broker configured the server is stateless over the pool's Redis (run as many replicas as
wanted); without one, sessions run in this process. Off loopback it refuses to start without a
token (``SHELLY_SERVE_TOKEN``, or ``--token``, which ``ps`` shows to every user of the machine);
see :mod:`shelly_dist.console.gate` for what else guards it.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import click

from shelly_dist.cli.errors import run_async
from shelly_dist.cli.options import config_options

if TYPE_CHECKING:
    from shelly_dist.console.backend import Backend
    from shelly_dist.engine import Engine

TOKEN_ENV = "SHELLY_SERVE_TOKEN"


@asynccontextmanager
async def open_backend(config_path: str | None, shelly_dir: str, *, engine_too: bool = False
                       ) -> AsyncIterator[tuple[Backend, Engine | None]]:
    """The pool's backend when the config names a broker, else this process's engine's; with
    ``engine_too`` (``--mcp``) an engine is opened on the pool as well, and the backend submits
    through its runtime."""
    from shelly_dist.engine.config import find_config, fingerprint, load_config

    config = load_config(find_config(config_path, shelly_dir))
    pool = bool(config.distributed.broker_url)
    if pool and not engine_too:
        from shelly_dist.console.pool import PoolBackend
        from shelly_dist.engine.config_runtime import runtime_settings
        from shelly_dist.runtime.celery import open_runtime

        backend = PoolBackend(config, open_runtime(runtime_settings(config), fingerprint(config)))
        try:
            await backend.runtime.check()  # Redis and the broker answer, before the first request
            yield backend, None
        finally:
            await backend.aclose()
        return
    from shelly_dist.engine import Engine

    async with await Engine.open(config, shelly_dir=shelly_dir) as engine:
        if pool:
            from shelly_dist.console.pool import PoolBackend

            backend = PoolBackend(config, engine.runtime, owns_runtime=False)  # type: ignore[arg-type]
            await backend.runtime.check()
        else:
            from shelly_dist.console.local import LocalBackend

            backend = LocalBackend(engine)  # type: ignore[assignment]
        try:
            yield backend, engine
        finally:
            await backend.aclose()


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option("--port", type=int, default=8700, show_default=True, help="The port (0 picks a free one).")
@click.option("--token", envvar=TOKEN_ENV, default=None, show_envvar=True,
              help="Token every API request must carry (required off loopback; prefer the environment "
                   "variable, which ps does not show).")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="A Host name the server answers besides loopback and the bound address (repeatable; "
                   "without it a server on 0.0.0.0 answers any name, guarded by its token).")
@click.option("--mcp", "with_mcp", is_flag=True,
              help="Also serve the project's tools and agent_<name> tools over MCP (streamable HTTP) under /mcp.")
@config_options
def serve_command(host: str, port: int, token: str | None, allow_hosts: tuple[str, ...], with_mcp: bool,
                  config_path: str | None, shelly_dir: str) -> None:
    """Serve the REST API, the event streams and the web console (http://127.0.0.1:8700/)."""
    from shelly_dist.console.gate import Gate, allowed_hosts, needs_token

    if not token and needs_token(host):
        raise click.UsageError(
            f"serve: --host {host} is reachable from other machines: set {TOKEN_ENV} (or --token) so every "
            "request must carry it (Authorization: Bearer <token>, or the console's login)")
    gate = Gate(token=token or None, hosts=allowed_hosts(host, allow_hosts))

    async def main() -> int:
        from shelly_dist.cli.mcp import until_signal
        from shelly_dist.console.app import build_app, serve

        async with open_backend(config_path, shelly_dir, engine_too=with_mcp) as (backend, engine):
            app = build_app(backend, gate)
            if engine is not None and with_mcp:
                from shelly_dist.console.mcp import MCP_PATH, mount_mcp
                from shelly_dist.engine import new_session_id

                session = new_session_id()
                tools = mount_mcp(app, engine, session)
                click.echo(f"MCP under {MCP_PATH}: {tools} tools, session {session}", err=True)

            def listening(url: str) -> None:
                auth = " (token required)" if token else ""
                click.echo(f"shelly console on {url} ({backend.name}){auth}", err=True)

            return await until_signal(serve(app, host=host, port=port, on_listening=listening))

    sys.exit(run_async(main()))
