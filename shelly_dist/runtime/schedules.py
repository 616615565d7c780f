"""The ticker that fires team schedules, the same embedded (in ``workflow run``) and on the pool
(in every worker): each tick reads only the due entries of the index and claims each before firing
it, so a due time fires once however many tickers run, and an idle pool costs one read per tick.

A fire is an ordinary post from ``system`` that @mentions the agent with its wakeup prompt, so it
wakes the agent as any mention does (and shows in the channel).

The same index holds the pool's **wake checks** (``workspace.due.wake_member``, left by
``PoolWakes.wake`` before each send): a due check whose agent still has inbox messages and whose
wake lease is free means the wake was never started (its send refused or lost, or its worker
killed before the run was journaled), so it is sent again, carrying on the pending retry's attempt
count; a check whose agent holds its lease waits for the lease's end; one whose inbox is empty
is dropped. Each is claimed like a schedule, so one worker sends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from shelly_dist.cancellation import pause
from shelly_dist.errors import StoreError
from shelly_dist.workspace.base import WorkspaceBase
from shelly_dist.workspace.due import DueIndex, is_wake_check, split

logger = logging.getLogger(__name__)

TICK = 1.0
"""Seconds between ticks: a schedule fires within about this long of its due time."""

SCHEDULER = "system"
"""Who posts a scheduled wakeup."""

RECHECK = 5.0
"""Seconds before a wake sent again by its check is checked again."""

Resend = Callable[[str, str, int, str], Awaitable[None]]
"""Send a wake again: session, agent, attempt, last error (``PoolWakes.wake``)."""


class Scheduler:
    def __init__(self, index: DueIndex, workspace_of: Callable[[str], WorkspaceBase], *, tick: float = TICK,
                 resend: Resend | None = None) -> None:
        self.index = index
        self.workspace_of = workspace_of
        self.interval = tick
        self.resend = resend
        self._task: asyncio.Task[None] | None = None

    async def tick(self, now: float | None = None) -> int:
        """Fire what is due at ``now``; returns how many fired here."""
        now = time.time() if now is None else now
        fired = 0
        for entry, score in await self.index.due(now):
            session, agent = split(entry)
            ws = self.workspace_of(session)
            if is_wake_check(entry):
                fired += await self._check_wake(ws, session, agent, entry, score, now)
                continue
            schedule = await ws.schedule(agent)
            if schedule is None or await ws.stop_requested():
                await self.index.remove(entry)
                continue
            if schedule.every:
                status = (await ws.statuses()).get(agent)
                if status is not None and status.state == "running":
                    await self.index.claim(entry, score, now + schedule.every)
                    continue
                last = status.updated_at if status is not None else 0.0
                if last and now - last < schedule.every:  # active meanwhile: the clock restarted
                    await self.index.claim(entry, score, last + schedule.every)
                    continue
            if await self.index.claim(entry, score, schedule.next_due(now, now)):
                await ws.send(SCHEDULER, f"@{agent} {schedule.prompt}")
                fired += 1
        return fired

    async def _check_wake(self, ws: WorkspaceBase, session: str, agent: str, entry: str, score: int,
                          now: float) -> int:
        """Send ``agent``'s wake again if it was never started; 1 when sent here."""
        if not await ws.inbox(agent):
            await self.index.drop(entry, score)  # handled (unless a new wake hinted it meanwhile)
            return 0
        left = await ws.wake_lease_left(agent)
        if left > 0:  # a wake holds the agent: its end wakes it again if messages remain
            await self.index.claim(entry, score, now + left + self.interval)
            return 0
        if self.resend is None or not await self.index.claim(entry, score, now + RECHECK):
            return 0
        attempt, error = await ws.retry_of(agent)
        logger.info("team: wake of %s in %s asked for but not started; sending it again", agent, session)
        await self.resend(session, agent, attempt, error)
        return 1

    async def run(self) -> None:
        """Tick until cancelled; a Redis outage is logged and waited out."""
        while True:
            try:
                await self.tick()
            except StoreError as exc:
                logger.warning("schedules: %s", exc)
            await pause(self.interval)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name="team-schedules")

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
