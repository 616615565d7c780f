"""Spawned children in one process: asyncio tasks, their outcomes kept in memory.

The embedded :class:`~shelly_dist.agent.spawn.Spawner`. A spawned child runs through the
delegator's one child lifecycle (:meth:`InlineDelegator.run_child`), as an asyncio task the
parent does not await; its end becomes an announcement in the parent's list, which the parent's
run drains before its next model call. Limits, dedup and the timeout behave as on the pool
(:mod:`shelly_dist.runtime.celery.children.spawns`), where the same state lives in Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Protocol

from shelly_dist import events
from shelly_dist.agent import children
from shelly_dist.agent.records import ChildRequest, DelegateEntry
from shelly_dist.agent.spawn import DEDUP_WINDOW, SpawnAck, Spawned, limit_error, state_of
from shelly_dist.agent.stops import TASK_CANCELED
from shelly_dist.runtime.local.stops import stop

if TYPE_CHECKING:
    from shelly_dist.agent.run import Run


class ChildRunner(Protocol):
    """What a spawner needs of its delegator (:class:`~.delegator.InlineDelegator` is one): the one
    child lifecycle, and how many steps each child it ran took. A protocol, so the delegator can
    own its spawner without the two modules importing each other."""

    iterations: dict[str, int]

    async def run_child(self, parent: Run, request: ChildRequest, *, run_id: str = "") -> DelegateEntry: ...


class LocalSpawner:
    """The spawned runs of one run tree in this process, by parent run id."""

    def __init__(self, delegator: ChildRunner) -> None:
        self.delegator = delegator
        self._runs: dict[str, dict[str, Spawned]] = {}
        self._announced: dict[str, list[Spawned]] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._parent_of: dict[str, str] = {}
        self._dedup: dict[str, tuple[str, float]] = {}
        self._wake: dict[str, asyncio.Event] = {}

    async def start(self, parent: Run, request: ChildRequest, spawned: Spawned, dedup: str) -> SpawnAck:
        pid, now = parent.state.run_id, time.monotonic()
        key = f"{pid}:{dedup}"
        if (hit := self._dedup.get(key)) is not None and hit[1] > now:
            return SpawnAck(hit[0], "accepted")
        runs = self._runs.setdefault(pid, {})
        if spawned.run_id in runs:  # the same call again: the run it started
            return SpawnAck(spawned.run_id, "accepted")
        active = sum(1 for s in runs.values() if not s.ended)
        if (error := limit_error(parent.agent.options.max_children, active)) is not None:
            return SpawnAck("", "rejected", error)
        spawned.state = "running"
        runs[spawned.run_id] = spawned
        self._dedup[key] = (spawned.run_id, now + DEDUP_WINDOW)
        self._parent_of[spawned.run_id] = pid
        self._tasks[spawned.run_id] = asyncio.create_task(self._run(parent, request, spawned))
        parent.emit(events.RUN_SPAWNED, child_run=spawned.run_id, child_agent=spawned.agent,
                    detach=spawned.detach, task=request.task[: children.TASK_LIMIT])
        return SpawnAck(spawned.run_id, "accepted")

    async def _run(self, parent: Run, request: ChildRequest, spawned: Spawned) -> None:
        limit = parent.agent.options.spawn_timeout
        ending = children.Ending.FAILED
        try:
            async with asyncio.timeout(limit or None):
                entry = await self.delegator.run_child(parent, request, run_id=spawned.run_id)
            ending = children.ending_of(entry)
        except TimeoutError:
            entry = DelegateEntry(agent=request.agent, error=f"spawn: timed out after {limit:g}s")
            await self.cancel_all(spawned.run_id)
        except asyncio.CancelledError:
            entry, ending = DelegateEntry(agent=request.agent, error="canceled"), children.Ending.CANCELED
            await self.cancel_all(spawned.run_id)
        iterations = self.delegator.iterations.pop(spawned.run_id, 0)
        ended = spawned.ended_with(entry, state_of(entry, ending), iterations)
        pid = parent.state.run_id
        self._runs[pid][spawned.run_id] = ended
        self._announced.setdefault(pid, []).append(ended)
        self._event(pid).set()

    def _event(self, pid: str) -> asyncio.Event:
        return self._wake.setdefault(pid, asyncio.Event())

    async def spawned(self, parent_id: str) -> list[Spawned]:
        return list(self._runs.get(parent_id, {}).values())

    async def cancel(self, parent_id: str, run_id: str) -> bool:
        task = self._tasks.get(run_id)
        if self._parent_of.get(run_id) != parent_id or task is None or task.done():
            return False
        await stop([task], TASK_CANCELED)
        return True

    async def cancel_all(self, pid: str) -> None:
        """Cancel every run ``pid`` spawned (each cancels its own in turn: the subtree): ``pid``
        was cancelled, or stopped by its delegation."""
        for rid in [r for r, p in self._parent_of.items() if p == pid]:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.cancel(pid, rid))

    async def announcements(self, parent_id: str, start: int) -> list[Spawned]:
        return list(self._announced.get(parent_id, [])[start:])

    async def wait(self, parent: Run) -> bool:
        pid = parent.state.run_id
        while True:
            wake = self._event(pid)
            wake.clear()
            if len(self._announced.get(pid, [])) > parent.state.announced:
                return True
            if not any(not s.detach and not s.ended for s in self._runs.get(pid, {}).values()):
                return False
            await wake.wait()

    async def settle(self, *, cancel: bool) -> None:
        """The top-level run ended: wait for every spawned run still going (detached ones too:
        the tree is done only then), or cancel them all when the top-level run failed."""
        while pending := [t for t in self._tasks.values() if not t.done()]:
            if cancel:
                for t in pending:
                    t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
