"""Run task messages a killed worker had taken from a Redis broker but not yet handed to Celery.

Kombu's Redis transport takes a message with ``BRPOP``, records it in its unacknowledged index
(``unacked`` and ``unacked_index``, a Redis round trip) and only then hands it to Celery, whose
``task_received`` marks the run received (``scripts.RECEIVED``, issue 41). A worker ``kill -9``-ed
between the two leaves a message nobody holds and no receipt says so: kombu restores it only after
the visibility timeout, and the journal re-sends its run only at ``SENT``'s backstop — eleven
minutes on defaults. Under a busy queue the consumer spends most of its time in exactly that
window, so a kill mid-batch left such a message three times in three tries (a 2,000-item batch
stuck at 1,999 lines; issue 41).

So the workers on a Redis broker sweep the unacknowledged entries older than a lease (one worker
of the pool per round, every :data:`SWEEP_EVERY` seconds): long past the milliseconds a live worker
takes from the index to the receipt. An entry of one of this queue's run tasks whose run is still
``queued`` or ``waiting`` with neither a lease nor a receipt is an orphan: it is taken out of the
index (atomically: one sweeper handles it) and its run is made due now (:meth:`Journal.due_now`),
so the reapers decide with their usual rules (``scripts.REAP``) — and re-send it. Everything else is left
to kombu: a live worker's message (its run leased or received) and a finished run's stale entry.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time

import redis.asyncio as aioredis

from shelly_dist.cancellation import pause
from shelly_dist.runtime.celery.journal import Journal, RunStatus
from shelly_dist.runtime.celery.names import RESUME_AGENT, RUN_AGENT
from shelly_dist.runtime.celery.worker.resync import redis_broker

logger = logging.getLogger(__name__)

SWEEP_EVERY = 5.0
"""Seconds between two sweeps of the broker's unacknowledged index."""
PAGE = 200
"""Entries looked at per sweep at most (the oldest first)."""
UNACKED, UNACKED_INDEX = "unacked", "unacked_index"
"""Kombu's Redis transport's keys (``Channel.unacked_key``, ``unacked_index_key``)."""

TAKE = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) > tonumber(ARGV[2]) then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
"""
"""Take one entry out of kombu's unacknowledged index if it is still there and still old enough
(another worker's sweep may have taken it, or kombu restored it)."""


def run_of(payload: str, queue: str) -> tuple[str, str] | None:
    """``(run_id, root)`` of an unacknowledged entry holding a run task of ``queue`` (kombu stores
    ``[message, exchange, routing_key]``; the protocol-2 body is ``[args, kwargs, embed]``), else
    ``None``."""
    try:
        message, _exchange, routing_key = json.loads(payload)
        if routing_key != queue or message.get("headers", {}).get("task") not in (RUN_AGENT, RESUME_AGENT):
            return None
        body = message["body"]
        if message.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args = json.loads(body)[0]
        return str(args[0]), str(args[1] or args[0])
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None


class OrphanSweeper:
    """One worker's sweep of the Redis broker's unacknowledged index (see the module docstring)."""

    def __init__(self, journal: Journal, broker_url: str, queue: str, *, prefix: str = "") -> None:
        self.journal = journal
        self.queue = queue
        self.index, self.hash = prefix + UNACKED_INDEX, prefix + UNACKED
        self.broker = aioredis.Redis.from_url(broker_url, decode_responses=True,
                                              client_name="shelly-worker-orphans")
        self._take = self.broker.register_script(TAKE)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="shelly-orphans")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.broker.aclose()

    async def _loop(self) -> None:
        while True:
            await pause(SWEEP_EVERY)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker or Redis away: the next sweep looks again
                logger.info("orphans: %s", exc)

    async def sweep(self, *, now: float | None = None) -> int:
        """One pass (by one worker of the pool at a time); returns how many orphaned run messages
        were taken and their runs pulled in."""
        journal = self.journal
        if not await journal.client.set(journal.keys.orphan_sweep(), "1", nx=True, px=int(SWEEP_EVERY * 1000)):
            return 0  # another worker sweeps this round: one sweep per pool, not one per worker
        cut = (time.time() if now is None else now) - journal.settings.lease
        tags = await self.broker.zrangebyscore(self.index, "-inf", cut, start=0, num=PAGE)
        if not tags:
            return 0
        payloads = await self.broker.hmget(self.hash, tags)
        found = [(tag, run) for tag, payload in zip(tags, payloads, strict=True)
                 if payload and (run := run_of(payload, self.queue)) is not None]
        taken = 0
        for (tag, (run_id, root)), orphaned in zip(found, await self._orphaned([r for _, (r, _) in found]),
                                                   strict=True):
            if not orphaned or not await self._take(keys=[self.index, self.hash], args=[tag, cut]):
                continue
            await journal.due_now(root, run_id)
            taken += 1
            logger.warning("orphans: run %s's task message was taken by a worker that died before it could "
                           "receive it; sending it again", run_id)
        return taken

    async def _orphaned(self, runs: list[str]) -> list[bool]:
        """Per run: still ``queued`` or ``waiting``, with neither a lease nor a receipt (one
        pipelined read for all)."""
        if not runs:
            return []
        keys = self.journal.keys
        async with self.journal.client.pipeline(transaction=False) as pipe:
            for run_id in runs:
                pipe.hget(keys.run(run_id), "status")
                pipe.exists(keys.run_lease(run_id))
                pipe.exists(keys.run_received(run_id))
            out = await pipe.execute()
        return [status is not None and RunStatus.read(status) in (RunStatus.QUEUED, RunStatus.WAITING)
                and not leased and not received
                for status, leased, received in zip(out[0::3], out[1::3], out[2::3], strict=True)]


def sweeper_for(journal: Journal) -> OrphanSweeper | None:
    """The sweeper of a worker whose broker is a Redis (``None`` for AMQP, where a dead
    connection's unacknowledged messages return at once, and for Sentinel URLs)."""
    url = journal.settings.broker_url
    if not redis_broker(url) or url.startswith("sentinel"):
        return None
    return OrphanSweeper(journal, url, journal.settings.queue)
