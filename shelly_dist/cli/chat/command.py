"""``shelly chat`` (and ``shelly`` with no command on a terminal): open the chat."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import click

from shelly_dist.cli.errors import fail
from shelly_dist.cli.options import config_options

if TYPE_CHECKING:
    from shelly_dist.engine import Engine
    from shelly_dist.tools.permissions import InteractiveApprover


def engine_opener(config_path: str | None, shelly_dir: str, agent: str | None
                  ) -> Callable[[InteractiveApprover], Awaitable[Engine]]:
    """How the chat opens its engine, with the person's approver. On a pool only the chat's agent's
    MCP servers start (a resumed session starts its own agent's)."""
    from shelly_dist.engine import Engine

    async def opener(approver: InteractiveApprover) -> Engine:
        return await Engine.open(config_path, shelly_dir=shelly_dir, approver=approver, root=agent or True)

    return opener


def open_chat(*, agent: str | None, session_id: str | None, config_path: str | None, shelly_dir: str) -> None:
    """Run the chat until ``/quit``; a config that cannot be opened is reported as every command
    reports it (one line, exit 2)."""
    from shelly_dist.cli.chat.app import ChatApp

    app = ChatApp(engine_opener(config_path, shelly_dir, agent), agent=agent, session_id=session_id)
    code = app.run()
    if app.error is not None:
        fail(app.error)
    sys.exit(code or 0)


@click.command("chat")
@click.option("--agent", default=None, help="Agent to talk with (default: entry_agent, else the first).")
@click.option("--session", "session_id", default=None, help="Continue a saved session by id.")
@config_options
def chat_command(agent: str | None, session_id: str | None, config_path: str | None, shelly_dir: str) -> None:
    """Talk with the team in the terminal (what `shelly` opens on a terminal)."""
    open_chat(agent=agent, session_id=session_id, config_path=config_path, shelly_dir=shelly_dir)
