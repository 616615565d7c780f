"""The reaper: every worker re-enqueues the runs whose deadline passed, without a leader.

Each run tree keeps a deadline index (``…:run:{root}:deadlines``, a sorted set of run ids scored
by the time, in ms, by which someone must show progress): a held lease's expiry (moved forward by
every heartbeat), a queued run's re-send time, a completed join's resume time. The live trees are
listed in ``…:trees``. Every ``reap_interval`` each worker reads the earliest deadline of every
live tree (one pipelined round trip), and for each run past its deadline runs the ``REAP`` script,
which decides and moves the deadline forward in one atomic step — so of many reapers racing, one
re-enqueues a given run. What is re-enqueued:

* a run whose worker died (``running``, lease lapsed) — recovery after ``kill -9`` in about
  ``lease + reap_interval`` seconds, on either broker, without waiting for a redelivery;
* a parent whose children have all joined (``waiting``, nothing pending) but whose resume was
  never sent — the worker died between its finish and the send;
* a run still ``queued`` after ``requeue_after`` — its task message was lost (the process that
  registered the run died before sending it), or is merely late behind a backlog: the duplicate
  is then dropped by its claim;
* a run whose task the broker refused (cut, restarting): the sender made it due at once
  (:meth:`.Journal.due_now`), so it is sent again on the next scan, not after ``requeue_after``.
  A scan stops sending at the first refusal: the runs it did not reach stay due for the next one,
  so a long broker outage costs one refused send per scan, not one per due run.

The reaper also answers the ``ask_user`` questions past their ``options.question_timeout`` with
the timeout error result (:func:`.questions.expire_due`), resuming their runs, and times out the
interactive children that neither asked nor ended within theirs (:func:`.round_timeout.expire_due`).

The reaper also registers this worker's config generation (``…:generations``), so a worker of
another config leaves this generation's runs to it during a rolling update.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time

from shelly_dist.observability import metrics
from shelly_dist.runtime.celery import round_timeout
from shelly_dist.runtime.celery.executor import RESUME_AGENT, RUN_AGENT, Enqueue, enqueue_resume
from shelly_dist.runtime.celery.journal import Journal
from shelly_dist.runtime.celery.questions import expire_due
from shelly_dist.runtime.celery.record import TERMINAL
from shelly_dist.state.connection import redis_errors

logger = logging.getLogger(__name__)

BATCH = 100
"""Runs past their deadline handled per tree per scan (the rest wait for the next scan)."""


class BrokerRefused(Exception):
    """The broker refused a re-enqueue: sending more in this scan would only be refused too."""


class Reaper:
    """Scans the deadline indexes every ``reap_interval`` (with jitter) from one worker process."""

    def __init__(self, journal: Journal, enqueue: Enqueue, fingerprint: str) -> None:
        self.journal = journal
        self.enqueue = enqueue
        self.fingerprint = fingerprint
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="shelly-reaper")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        interval = self.journal.settings.reap_interval
        while True:
            try:
                await self.scan()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away: try again next time; the runs wait in Redis
                logger.warning("reaper: %s", exc)
            await asyncio.sleep(interval * random.uniform(0.75, 1.25))

    async def scan(self) -> int:
        """One pass over every live tree, then over the questions past their timeout; returns how
        many runs were re-enqueued."""
        sent, roots = await self._scan_trees()
        settings = self.journal.settings
        await expire_due(self.journal.client, self.journal.keys, roots, retention=settings.retention,
                         requeue_after=settings.requeue_after,
                         resume=lambda run_id, _root: enqueue_resume(self.journal, self.enqueue, run_id))
        await round_timeout.expire_due(self.journal.client, self.journal.keys, retention=settings.retention,
                                       requeue_after=settings.requeue_after,
                                       resume=lambda run_id: enqueue_resume(self.journal, self.enqueue, run_id))
        return sent

    async def _scan_trees(self) -> tuple[int, list[str]]:
        """Re-enqueue the runs past their deadline; returns how many, and the live trees."""
        keys, client, settings = self.journal.keys, self.journal.client, self.journal.settings
        now = time.time()
        with redis_errors("reaper"):
            async with client.pipeline(transaction=False) as pipe:
                pipe.zadd(keys.generations(), {self.fingerprint: now})
                pipe.zremrangebyscore(keys.generations(), "-inf", now - settings.retention)
                pipe.expire(keys.generations(), settings.retention)
                pipe.zremrangebyscore(keys.live_trees(), "-inf", now - settings.retention)
                pipe.expire(keys.live_trees(), settings.retention)
                pipe.zrange(keys.live_trees(), 0, -1)
                roots = (await pipe.execute())[-1]
            if not roots:
                return 0, []
            async with client.pipeline(transaction=False) as pipe:
                for root in roots:
                    pipe.zrangebyscore(keys.tree_deadlines(root), "-inf", int(now * 1000), start=0, num=BATCH)
                    pipe.exists(keys.tree_deadlines(root))
                    pipe.hget(keys.run(root), "status")
                answers = await pipe.execute()
        sent = 0
        for i, root in enumerate(roots):
            due, indexed, status = answers[3 * i: 3 * i + 3]
            if not indexed and (status is None or status in TERMINAL):
                with redis_errors("reaper"):
                    await client.zrem(keys.live_trees(), root)
                continue
            for run_id in due:
                try:
                    sent += await self._reap(root, run_id)
                except BrokerRefused:
                    return sent, roots  # the rest stay due for the next scan
        return sent, roots

    async def _reap(self, root: str, run_id: str) -> int:
        out = await self.journal.reap(root, run_id)
        status = out[0]
        if status not in ("queued", "running", "waiting"):
            return 0
        _, root_id, agent, depth, session, preview = out
        kwargs = {"agent": agent, "depth": int(depth or 0), "session": session, "preview": preview}
        name = RESUME_AGENT if status == "waiting" else RUN_AGENT
        logger.warning("reaper: run %s (%s) is %s past its deadline; re-enqueued", run_id, agent, status)
        if await self.enqueue(name, [run_id, root_id], kwargs) is False:
            raise BrokerRefused(run_id)
        metrics.RUNS_REAPED.inc()
        return 1
