"""A client's wait for the ends of many root runs, at a cost that follows what ends (DESIGN §3
rule 17): ``shelly batch --concurrency 10000`` waits for 10,000 roots from one process.

Each waited root's ``ended`` channel is a :class:`~shelly_dist.redisio.hub.Listener` on the
process's one pub/sub connection (the hub), so the subscriptions cost one connection however many
roots wait. A root's record is read when its wait begins (after its channel is confirmed: a
``FINISH`` published before the read is seen by the read, one after it by the channel) and when a
message on its channel says it ended — one pipelined read for all the roots named since the last
read. The hub's poll ticks, which a single watch re-reads on, are not followed here: a message on a
live connection is not lost, so only an outage (the hub's ``outages`` moves) makes every root be
checked again, plus a backstop every :data:`BACKSTOP` seconds (longer past 1,500 roots: at most
:data:`BACKSTOP_RATE` a second) — one pipelined ``HGET status`` per root, the ended ones then read
whole. Waiting on 2,000 roots thus costs about 50 commands a second instead of 2,000 re-reads a
second, and one connection of the client's bounded pool at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable

import redis.asyncio as aioredis

from shelly_dist.cancellation import pause
from shelly_dist.errors import RunError, RunNotFound
from shelly_dist.redisio.blocking import read_through
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.hub import Hub, Watch
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.journal import RunRecord

BACKSTOP = 30.0
"""Seconds between two checks of every waited root's status (messages are not lost on a live
connection, and an outage is noticed at once: this only bounds what nobody foresaw)."""

TICKS = 3
"""Slices the backstop's round is read in: one every ``BACKSTOP / TICKS`` seconds, so its cost is
spread instead of a burst of every root at once."""

BACKSTOP_RATE = 50.0
"""Roots a second the backstop reads at most: past 1,500 waiting roots its interval grows with
them (10,000 roots: every 200 s), so its cost stays flat however many wait (DESIGN §3 rule 17)."""

CHUNK = 500
"""Roots per pipelined read (one round trip each; a reply of a few hundred kilobytes at most)."""

logger = logging.getLogger(__name__)

_TERMINAL = frozenset({"done", "failed", "canceled"})


class RootWaiter:
    """Waits for root runs' ends for one client and hub (one per process and event loop)."""

    def __init__(self, client: aioredis.Redis, keys: Keys, hub: Callable[[], Hub], *, backstop: float = BACKSTOP
                 ) -> None:
        self._client = client
        self._keys = keys
        self._hub = hub
        self._backstop = backstop
        self._waiters: dict[str, list[asyncio.Future[RunRecord]]] = {}
        self._watches: dict[str, Watch] = {}
        self._named: set[str] = set()
        """Roots to read: a message said they ended, or their wait just began."""
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._outages = 0

    @property
    def waiting(self) -> int:
        """Roots waited for now."""
        return len(self._waiters)

    async def wait(self, run_id: str, timeout: float | None = None) -> RunRecord:  # noqa: ASYNC109
        """The run's record once it has ended; ``RunError`` when there is no such run, or when it
        is still going after ``timeout`` seconds."""
        future: asyncio.Future[RunRecord] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(run_id, []).append(future)
        try:
            if run_id not in self._watches:
                # Subscribing is safe to repeat (a failed watch is dropped): a Redis restarting
                # under a batch is waited out here as in the reads, not the item given up (issue 41).
                self._watches[run_id] = await read_through("coordinator", lambda: self._hub().watch(
                    self._keys.run_ended(run_id), on_move=lambda hint, r=run_id: self._moved(r, hint)))
            self._named.add(run_id)  # read once, now that its end cannot be missed
            self._running()
            try:
                async with asyncio.timeout(timeout):
                    return await asyncio.shield(future)
            except TimeoutError:
                raise RunError(f"run {run_id}: still going after {timeout}s", run_id=run_id) from None
        finally:
            waiters = self._waiters.get(run_id, [])
            if future in waiters:
                waiters.remove(future)
            if not waiters:
                self._waiters.pop(run_id, None)
                watch = self._watches.pop(run_id, None)
                if watch is not None:
                    await asyncio.shield(watch.aclose())

    def _moved(self, run_id: str, hint: str | None) -> None:
        if hint is not None:
            self._named.add(run_id)
            self._wake.set()
        elif self._hub().outages != self._outages:  # messages may have been lost: look at everyone
            self._wake.set()

    def _running(self) -> None:
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name="shelly-root-waiter")

    async def _loop(self) -> None:
        tick = self._backstop / TICKS
        backstop_at, cursor = time.monotonic() + tick, 0
        while self._waiters:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, backstop_at - time.monotonic())):
                    await self._wake.wait()
            self._wake.clear()
            try:
                outages = self._hub().outages
                roots = list(self._waiters)
                if outages != self._outages:  # messages may be lost: everyone, now
                    self._outages = outages
                    self._named |= await self._ended(roots)
                elif time.monotonic() >= backstop_at:  # the next slice of the backstop's round
                    backstop_at = time.monotonic() + tick
                    size = min(math.ceil(len(roots) / TICKS), math.ceil(BACKSTOP_RATE * tick))
                    cursor = cursor if cursor < len(roots) else 0
                    self._named |= await self._ended(roots[cursor:cursor + size])
                    cursor += size
                named, self._named = self._named, set()
                await self._read([r for r in named if r in self._waiters])
            except Exception as exc:  # Redis away past the reads' patience: everyone is checked again
                logger.warning("coordinator: waiting for %d runs: %s; looking again", len(self._waiters), exc)
                self._outages = -1
                await pause(1.0)
                self._wake.set()

    async def _ended(self, roots: list[str]) -> set[str]:
        """The roots among ``roots`` that have ended (or whose record is gone), by status alone."""
        out: set[str] = set()
        for i in range(0, len(roots), CHUNK):
            chunk = roots[i:i + CHUNK]
            statuses = await read_through("coordinator", lambda c=chunk: self._pipelined(c, status=True))
            out |= {r for r, s in zip(chunk, statuses, strict=True) if s is None or s in _TERMINAL}
        return out

    async def _read(self, roots: list[str]) -> None:
        """Read ``roots``' records; hand each ended one (or a missing one's error) to its waiters."""
        for i in range(0, len(roots), CHUNK):
            chunk = roots[i:i + CHUNK]
            raws = await read_through("coordinator", lambda c=chunk: self._pipelined(c, status=False))
            for run_id, raw in zip(chunk, raws, strict=True):
                if not raw:
                    self._settle(run_id, error=RunNotFound(f"run {run_id}: not found", run_id=run_id))
                    continue
                record = RunRecord.parse({"id": run_id, **raw})
                if record.ended:
                    self._settle(run_id, record=record)

    async def _pipelined(self, roots: list[str], *, status: bool) -> list[object]:
        with redis_errors("coordinator"):
            async with self._client.pipeline(transaction=False) as pipe:
                for run_id in roots:
                    if status:
                        pipe.hget(self._keys.run(run_id), "status")
                    else:
                        pipe.hgetall(self._keys.run(run_id))
                return list(await pipe.execute())

    def _settle(self, run_id: str, *, record: RunRecord | None = None, error: BaseException | None = None) -> None:
        for future in self._waiters.get(run_id, []):
            if not future.done():
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(record)  # type: ignore[arg-type]

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
