"""Which wakes an engine runs: in this process on the local runtime, on the pool otherwise.

An @mention posted through this engine's stores (a ``channel_send``, ``shelly send``, a workflow's
kickoff) starts a wake of each agent it lands in the inbox of (``SessionStores.on_post``).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from shelly_dist.agent import Registry
from shelly_dist.engine.eventbus import EventBus
from shelly_dist.engine.stores import SessionStores
from shelly_dist.events import Event, EventSink
from shelly_dist.redisio.keys import DEFAULT_RETENTION
from shelly_dist.runtime import Runtime
from shelly_dist.runtime.local.wakes import LocalWakes
from shelly_dist.runtime.wake import Wakes


class TeamHost(Protocol):
    """What the team's events and wakes use of an engine (the ``Engine`` is one): named here, so
    the engine imports this module and not the other way round."""

    bus: EventBus
    runtime: Runtime
    stores: SessionStores

    def registry(self, session: str) -> Registry: ...


class StreamEvents:
    """Writes team events to their session's Redis stream (``shelly events`` and the live view of
    every process read it), each in the background; :meth:`aclose` waits for those under way."""

    def __init__(self, stores: SessionStores) -> None:
        self._stores = stores
        self._retention = int(stores.retention or DEFAULT_RETENTION)
        self._pending: set[asyncio.Task[None]] = set()

    def __call__(self, event: Event) -> None:
        from shelly_dist.runtime.celery.journal.stream import StreamSink, routed

        running = routed(event.session_id)
        if running is not None:  # raised by a run's step: written in order with its events
            running(event)
            return
        stream = StreamSink(self._stores.client(), self._stores.keys, event.session_id, retention=self._retention)
        stream(event)
        task = asyncio.get_running_loop().create_task(stream.flush())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def aclose(self) -> None:
        await asyncio.gather(*self._pending, return_exceptions=True)


def team_events(engine: TeamHost) -> EventSink:
    """Where ``engine``'s team events go: the session's stream when the stores are shared, else the
    engine's bus."""
    return StreamEvents(engine.stores) if engine.stores.shared else engine.bus.publish


def team_wakes(engine: TeamHost) -> Wakes:
    """The wakes of ``engine``: on its pool when its runtime is one, else on this loop."""
    settings = getattr(engine.runtime, "settings", None)
    if engine.runtime.name != "local" and settings is not None:
        from shelly_dist.runtime.celery.children.wakes import PoolWakes

        return PoolWakes(settings, due=engine.stores.due_index())
    return LocalWakes(engine.runtime, lambda session, agent: engine.registry(session).spawn(agent),
                      engine.stores.workspace)
