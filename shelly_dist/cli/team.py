"""``shelly send|channel|inbox|docs --session S``: a team's workspace from outside (needs Redis).

``send`` posts as the member ``user``; on a pool its @mentions wake the agents as any post does.
"""

from __future__ import annotations

import json
from typing import Any

import click

from shelly_dist.cancellation import pause
from shelly_dist.cli.backend import echo_json, shared_stores
from shelly_dist.cli.errors import run_async
from shelly_dist.cli.options import session_scoped
from shelly_dist.engine.config import find_config, load_config
from shelly_dist.engine.team import StreamEvents
from shelly_dist.workspace import USER, ChannelMessage
from shelly_dist.workspace.prompt import channel_line

FOLLOW_POLL = 0.5


@click.command("send")
@click.argument("message")
@click.option("--to", default=None, help="Send as a direct message to this agent only.")
@session_scoped
def send_command(message: str, to: str | None, session_id: str, config_path: str | None, shelly_dir: str) -> None:
    """Post MESSAGE to the session's channel as `user` (@mentions wake those agents)."""

    async def main() -> dict[str, Any]:
        async with shared_stores(config_path, shelly_dir, "send") as stores:
            cfg = load_config(find_config(config_path, shelly_dir))
            if cfg.distributed.broker_url:
                from shelly_dist.engine.config_runtime import runtime_settings
                from shelly_dist.runtime.celery.children.wakes import PoolWakes

                stores.on_post = PoolWakes(runtime_settings(cfg), due=stores.due_index()).on_post
            events = StreamEvents(stores)
            stores.on_event = events
            sent = await stores.workspace(session_id).send(USER, message, to=to)
            await events.aclose()
            return sent.as_json()

    echo_json(run_async(main()))


def _print(messages: list[ChannelMessage], as_json: bool) -> None:
    for m in messages:
        click.echo(json.dumps(m.as_json(), ensure_ascii=False) if as_json else channel_line(m))


@click.command("channel")
@click.option("--follow", is_flag=True, help="Keep printing new messages until interrupted.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per message.")
@session_scoped
def channel_command(follow: bool, as_json: bool, session_id: str, config_path: str | None, shelly_dir: str) -> None:
    """Print the session's channel (every kind: what people may see)."""

    async def main() -> None:
        async with shared_stores(config_path, shelly_dir, "channel") as stores:
            ws = stores.workspace(session_id)
            seen = 0
            while True:
                new = await ws.read(None, since=seen, limit=0)
                _print(new, as_json)
                seen = new[-1].id if new else seen
                if not follow:
                    return
                await pause(FOLLOW_POLL)

    run_async(main())


@click.command("inbox")
@click.argument("agent")
@session_scoped
def inbox_command(agent: str, session_id: str, config_path: str | None, shelly_dir: str) -> None:
    """Print AGENT's unacked messages as JSON."""

    async def main() -> list[dict[str, Any]]:
        async with shared_stores(config_path, shelly_dir, "inbox") as stores:
            inbox = await stores.workspace(session_id).inbox(agent)
            return [{**e.message.as_json(), "priority": e.priority} for e in inbox]

    echo_json(run_async(main()))


@click.command("docs")
@click.argument("name", required=False)
@session_scoped
def docs_command(name: str | None, session_id: str, config_path: str | None, shelly_dir: str) -> None:
    """Print the document NAME, or list the documents."""

    async def main() -> Any:
        async with shared_stores(config_path, shelly_dir, "docs") as stores:
            ws = stores.workspace(session_id)
            return await ws.doc_read(name) if name else await ws.doc_list()

    out = run_async(main())
    if isinstance(out, str):
        click.echo(out)
    else:
        echo_json(out)
