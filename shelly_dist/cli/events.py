"""``shelly events``: the session's event stream, as written by every worker and coordinator."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from shelly_dist import events
from shelly_dist.cli.distributed import redis_for
from shelly_dist.cli.errors import run_async
from shelly_dist.cli.options import config_options, json_option, session_option
from shelly_dist.errors import UsageError
from shelly_dist.events import Event


def _line(event: Event) -> str:
    """One line per event (kinds and fields: docs/events.md)."""
    stamp = time.strftime("%H:%M:%S", time.localtime(event.timestamp))
    data = event.data
    detail = ""
    where = f"on {data['worker']} " if data.get("worker") else ""
    if event.kind in (events.RUN_STARTED, events.RUN_RESUMED):
        detail = f"{where}depth {data.get('depth', '')}".strip()
    elif event.kind == events.RUN_FINISHED:
        entry = data.get("entry") or {}
        why = entry.get("error") or (f"handed off to {entry['handoff']}" if entry.get("handoff") else "")
        detail = f"{data.get('status')} {where}".strip() + (f": {why}" if why else "")
    elif event.kind in (events.TOOL_CALL_START, events.TOOL_CALL_END):
        detail = str(data.get("tool", ""))
    elif event.kind == events.MESSAGE_ADDED:
        detail = str(data.get("text", "")).replace("\n", " ")[:100]
    elif event.kind in (events.RUN_QUEUED, events.RUN_SPAWNED):
        detail = f"{data.get('child_agent')} ({data.get('child_run')})"
    elif event.kind == events.SPAWN_ANNOUNCED:
        detail = f"{data.get('child_agent')} ({data.get('child_run')}) {data.get('state')}"
    elif event.kind == events.ERROR:
        detail = str(data.get("error", ""))
    elif event.kind in (events.BATCH_SUBMITTED, events.BATCH_POLLING, events.BATCH_COMPLETED, events.BATCH_FALLBACK):
        detail = " ".join(str(x) for x in (data.get("vendor"), data.get("batch_id"),
                                            f"({data.get('count')} requests)" if data.get("count") else "",
                                            data.get("reason")) if x)
    elif event.kind == events.WARNING:
        detail = f"{data.get('code', '')}: {data.get('message', '')}".replace("\n", " ")
    return f"{stamp} {event.run_id:<24} {event.agent:<28} {event.kind:<18} {detail}".rstrip()


async def _known(client: Any, keys: Any, session_id: str) -> bool:
    """Whether Redis holds anything of the session: its event stream, its runs or its saved record."""
    from shelly_dist.redisio.connection import redis_errors

    with redis_errors("events"):
        return bool(await client.exists(keys.events(session_id), keys.session_runs(session_id),
                                        keys.saved_session(session_id)))


def _pooled(config_path: str | None, shelly_dir: str) -> bool:
    """Whether the config runs on a pool (a broker): its events are then in Redis."""
    from shelly_dist.engine.config import find_config, load_config

    return bool(load_config(find_config(config_path, shelly_dir)).distributed.broker_url)


@click.command("events")
@session_option
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events until interrupted.")
@json_option
@config_options
def events_command(session_id: str, follow: bool, as_json: bool, config_path: str | None, shelly_dir: str) -> None:
    """Print the events of a session (runs started, messages, tool calls, warnings, finished): from
    Redis on a pool, else from the state directory where embedded runs record them."""

    def show(event: Event) -> None:
        click.echo(json.dumps(event.model_dump(mode="json"), ensure_ascii=False) if as_json else _line(event))

    async def embedded() -> None:
        """No pool: the events ``shelly run`` recorded beside the saved session (state directory)."""
        import os
        from pathlib import Path

        from shelly_dist.engine.event_log import events_path, read_events
        from shelly_dist.engine.shellydir import ShellyDir, state_dir

        sessions = ShellyDir(Path(shelly_dir), state=state_dir(shelly_dir, os.environ)).sessions
        path = events_path(sessions, session_id)
        if not path.is_file():
            unknown = (f"events: session {session_id} has no recorded events in {path.parent} (embedded runs record "
                       "them there; `shelly sessions` lists the saved sessions)")
            if not follow:
                raise UsageError(unknown)
            click.echo(f"{unknown}; waiting for its first event", err=True)
        async for event in read_events(sessions, session_id, follow=follow):
            show(event)

    async def main() -> None:
        if not _pooled(config_path, shelly_dir):
            await embedded()
            return
        async with redis_for(config_path, shelly_dir, "events") as (client, keys):
            from shelly_dist.runtime.celery.client.events import read_events

            if not await _known(client, keys, session_id):
                unknown = (f"events: session {session_id} not found (no events, runs or saved conversation "
                           f"under key prefix {keys.prefix!r}; `shelly sessions` lists the saved ones)")
                if not follow:
                    raise UsageError(unknown)
                click.echo(f"{unknown}; waiting for its first event", err=True)

            async for _, event in read_events(client, keys, session_id, follow=follow):
                show(event)

    run_async(main())
