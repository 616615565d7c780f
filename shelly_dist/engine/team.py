"""Which wakes an engine runs: in this process on the local runtime, on the pool otherwise.

An @mention posted through this engine's stores (a ``channel_send``, ``shelly send``, a workflow's
kickoff) starts a wake of each agent it lands in the inbox of (``SessionStores.on_post``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from shelly_dist.events import Event, EventSink
from shelly_dist.runtime.local.wakes import LocalWakes
from shelly_dist.runtime.wake import Wakes
from shelly_dist.state.keys import DEFAULT_RETENTION

if TYPE_CHECKING:
    from shelly_dist.engine.engine import Engine


def team_events(engine: Engine) -> EventSink:
    """Where ``engine``'s team events go: the session's Redis stream when the stores are shared
    (``shelly events`` and the live view of every process read it), else the engine's bus."""
    if not engine.stores.shared:
        return engine.bus.publish
    from shelly_dist.runtime.celery.events import StreamSink

    pending: set[asyncio.Task[None]] = set()
    retention = int(engine.stores.retention or DEFAULT_RETENTION)

    def sink(event: Event) -> None:
        stream = StreamSink(engine.stores.client(), engine.stores.keys, event.session_id, retention=retention)
        stream(event)
        task = asyncio.get_running_loop().create_task(stream.flush())
        pending.add(task)
        task.add_done_callback(pending.discard)

    return sink


def team_wakes(engine: Engine) -> Wakes:
    """The wakes of ``engine``: on its pool when its runtime is one, else on this loop."""
    settings = getattr(engine.runtime, "settings", None)
    if engine.runtime.name != "local" and settings is not None:
        from shelly_dist.runtime.celery.wakes import PoolWakes

        return PoolWakes(settings)
    return LocalWakes(engine.runtime, lambda session, agent: engine.registry(session).spawn(agent),
                      engine.stores.workspace)
