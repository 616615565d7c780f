"""``shelly a2a serve``: an agent of the project as an A2A v1.0 server (``docs/observability.md``).

Runs go where ``shelly run`` sends them: embedded, or the coordinator here with the tree on the
worker pool when a broker is configured (then tasks are kept in Redis, so any replica answers).
A question or a gated tool call's approval turns the task ``input-required``; the task's next
message answers it. Off loopback a bearer token is required (``SHELLY_A2A_TOKEN``, or ``--token``, which ``ps``
shows), as for ``shelly mcp serve --transport http``; with ``--caller NAME=TOKEN`` (repeatable)
each token names a caller, who sees only its own tasks. ``Host``/``Origin`` are checked and bodies
bounded (4 MB) as the console does.
"""

from __future__ import annotations

import sys

import click

from shelly_dist.cli.errors import fail, run_async
from shelly_dist.cli.mcp import until_signal
from shelly_dist.cli.options import config_options
from shelly_dist.errors import UsageError

TOKEN_ENV = "SHELLY_A2A_TOKEN"
CALLERS_ENV = "SHELLY_A2A_CALLERS"


@click.group("a2a")
def a2a_group() -> None:
    """Agent2Agent (A2A v1.0): serve an agent to other agent platforms."""


@a2a_group.command("serve")
@click.option("--agent", "agent_name", default=None, help="The agent to serve (default: the entry agent).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8100, show_default=True, help="0 picks a free one.")
@click.option("--token", envvar=TOKEN_ENV, default=None, show_envvar=True,
              help="Bearer token every request but the card's must carry (required off loopback).")
@click.option("--caller", "callers", multiple=True, envvar=CALLERS_ENV, show_envvar=True,
              help="NAME=TOKEN, repeatable: a caller and its bearer token; each caller sees only its own "
                   f"tasks ({CALLERS_ENV} holds several, separated by spaces).")
@click.option("--public-url", default=None,
              help="The URL the Agent Card announces (default http://HOST:PORT/; set it behind a proxy).")
@click.option("--allow-host", "allow_hosts", multiple=True,
              help="A Host name to answer besides loopback's, the bound address and the public URL's (repeatable).")
@click.option("--max-body", type=click.IntRange(min=1), default=4 * 1024 * 1024, show_default=True,
              help="Bytes a request body may hold; larger ones get 413 unread.")
@config_options
def serve_command(agent_name: str | None, host: str, port: int, token: str | None, callers: tuple[str, ...],
                  public_url: str | None, allow_hosts: tuple[str, ...], max_body: int,
                  config_path: str | None, shelly_dir: str) -> None:
    """Serve an agent over A2A: Agent Card, message/send, message/stream, tasks/get, tasks/cancel."""
    from shelly_dist.engine.a2a import require_sdk
    from shelly_dist.tools.mcp.bearer import is_loopback

    try:
        require_sdk("a2a serve")
        from shelly_dist.engine.a2a.server import caller_tokens

        tokens = caller_tokens(token, callers)
    except UsageError as exc:
        fail(exc)
    if not tokens and not is_loopback(host):
        fail(UsageError(f"a2a serve: --host {host} is reachable from other machines: set {TOKEN_ENV} "
                        "(or --token) so every request must carry Authorization: Bearer <token>"))

    async def main() -> None:
        from shelly_dist.engine import Engine
        from shelly_dist.engine.a2a.server import serve

        # No answerer: a question or an approval waits (in this process, or in Redis on a pool) and
        # the task turns input-required until the task's next message answers it.
        # On a pool only the served agent's MCP servers start here (its children's on the workers).
        async with await Engine.open(config_path, shelly_dir=shelly_dir, root=agent_name or True) as engine:
            agent = engine.agent_name(agent_name)

            def listening(url: str) -> None:
                auth = " (bearer token required)" if tokens else ""
                click.echo(f"serving agent {agent} over A2A on {url} (runtime {engine.runtime.name}){auth}", err=True)

            await serve(engine, agent, host=host, port=port, token=token, public_url=public_url,
                        on_listening=listening, callers=tokens, allow_hosts=allow_hosts, max_body=max_body)

    sys.exit(run_async(until_signal(main())))
