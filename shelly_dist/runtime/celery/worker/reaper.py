"""The reaper: the worker elected for each shard of the due index re-enqueues the runs whose
deadline passed.

Each run tree keeps a deadline index (``…:run:{root}:deadlines``, a sorted set of run ids scored
by the time, in ms, by which someone must show progress): a held lease's expiry (moved forward by
every heartbeat), a queued run's re-send time, a completed join's resume time. The global due
index (:mod:`.due`) hints which trees may have something due, sharded over a fixed number of hash
tags. Every ``reap_interval`` each worker's reaper takes or keeps the scanner lease of the shards
nobody else holds (one script call), and for each shard it holds reads the trees past their hint
(``ZRANGEBYSCORE … LIMIT``); for each such tree it reads the tree's due runs and questions, runs
the ``REAP`` script on each due run, which decides and moves the deadline forward in one atomic
step — so even two reapers racing re-enqueue a given run once — and settles the tree's hint. An
idle pool thus costs a few commands per worker per scan, whatever the number of live trees
(DESIGN §3 rule 17). What is re-enqueued:

* a run whose worker died (``running``, lease lapsed) — recovery after ``kill -9`` in about
  ``lease + reap_interval`` seconds, on either broker, without waiting for a redelivery (a dead
  scanner's shards are taken over within ``SCANNER_LEASE`` scans, less than a run's lease);
* a parent whose children have all joined (``waiting``, nothing pending) but whose resume was
  never sent — the worker died between its finish and the send;
* a run still ``queued`` after ``requeue_after`` — its task message was lost (the process that
  registered the run died before sending it), or is merely late behind a backlog: the duplicate
  is then dropped by its claim;
* a run whose task the broker refused (cut, restarting): the sender made it due at once
  (:meth:`.Journal.due_now`), so it is sent again on the next scan, not after ``requeue_after``.
  A tree's check stops sending at the first refusal, and the scan with it: the runs it did not
  reach stay due for the next one, so a long broker outage costs a refused send per tree being
  checked (at most :data:`CHECKS_IN_FLIGHT`) per scan, not one per due run. The refused
  reaper also gives up its shards and sits out :data:`SIT_OUT` elections, so a worker whose own
  broker connection is cut leaves the sending to another worker's (which takes the shards on its
  next scan).

The reaper also answers the ``ask_user`` questions past their ``options.question_timeout`` with
the timeout error result (:func:`.questions.expire_due`, for the trees past their hint), resuming
their runs, and (the scanner of shard 0) times out the interactive children that neither asked
nor ended within theirs (:func:`.round_timeout.expire_due`) and sets the pool's pending decisions
by kind (``shelly_decisions_pending``: one round trip per scan, whatever the number waiting).

The reaper also registers this worker's config generation (``…:generations``) every
``GENERATION_EVERY`` seconds, so a worker of another config leaves this generation's runs to it
during a rolling update.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
import uuid

from shelly_dist.cancellation import pause
from shelly_dist.observability import metrics
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.runtime.celery.children import round_timeout
from shelly_dist.runtime.celery.children.join import enqueue_resume
from shelly_dist.runtime.celery.children.questions import expire_due, pending_counts
from shelly_dist.runtime.celery.journal import Journal
from shelly_dist.runtime.celery.names import RESUME_AGENT, RUN_AGENT, Enqueue
from shelly_dist.runtime.celery.worker.resync import pull_backstops, redis_broker

logger = logging.getLogger(__name__)

BATCH = 100
"""Trees per shard, and runs per tree, handled per scan (the rest wait for the next scan)."""

SCANNER_LEASE = 3
"""Scans (``reap_interval`` each) a shard's scanner lease lasts without renewal: a dead scanner's
shards are taken over within about this many intervals (6 s by default, inside a run's lease)."""

CHECKS_IN_FLIGHT = 16
"""Trees one scan checks at a time (a crash recovered, a burst of hints come due together)."""

SIT_OUT = 2
"""Elections a reaper whose send was refused sits out (the others' scans are at most 1.25
``reap_interval`` apart, so another worker, if any, takes its shards meanwhile)."""

GENERATION_EVERY = 10.0
"""Seconds between two registrations of this worker's config generation (well inside the 60 s
after which a generation counts as gone)."""


class BrokerRefused(Exception):
    """The broker refused a re-enqueue: sending more in this scan would only be refused too."""


class Reaper:
    """Scans the shards of the due index it is elected for, every ``reap_interval`` (with jitter),
    from one worker process (``name`` identifies it among the scanners; unique by default)."""

    def __init__(self, journal: Journal, enqueue: Enqueue, fingerprint: str, name: str = "") -> None:
        self.journal = journal
        self.enqueue = enqueue
        self.fingerprint = fingerprint
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._registered = 0.0
        self._sitting_out = 0
        self._task: asyncio.Task[None] | None = None
        self._pulls: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="shelly-reaper")

    async def aclose(self) -> None:
        for task in [self._task, *self._pulls]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _loop(self) -> None:
        interval = self.journal.settings.reap_interval
        while True:
            try:
                await self.scan()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away: try again next time; the runs wait in Redis
                logger.warning("reaper: %s", exc)
            await pause(interval * random.uniform(0.75, 1.25))

    async def scan(self) -> int:
        """One pass over the shards this reaper is elected for; returns how many runs were
        re-enqueued."""
        journal, settings = self.journal, self.journal.settings
        now = time.time()
        if now - self._registered >= GENERATION_EVERY:
            await self._register(now)
        if self._sitting_out:
            self._sitting_out -= 1
            return 0
        ttl = int(settings.reap_interval * SCANNER_LEASE * 1000)
        held = await journal.due.elect(self.name, int(now * 1000), ttl)
        due = await journal.due.due(held, int(time.time() * 1000), BATCH)
        gate = asyncio.Semaphore(CHECKS_IN_FLIGHT)

        async def check(root: str, seen: str) -> int:
            async with gate:
                return await self._check_tree(root, seen)

        outcomes = await asyncio.gather(*(check(root, seen) for root, seen in due), return_exceptions=True)
        sent = sum(n for n in outcomes if isinstance(n, int))
        errors = [e for e in outcomes if isinstance(e, BaseException)]
        if any(isinstance(e, BrokerRefused) for e in errors):  # the rest stay due, maybe for another worker
            await journal.due.resign(self.name)
            self._sitting_out = SIT_OUT
            return sent
        if errors:
            raise errors[0]
        if 0 in held:
            await round_timeout.expire_due(
                journal.client, journal.keys, retention=settings.retention, requeue_after=settings.requeue_after,
                resume=lambda run_id: enqueue_resume(journal, self.enqueue, run_id))
            for kind, n in (await pending_counts(journal.client, journal.keys)).items():
                metrics.DECISIONS_PENDING.labels(kind).set(n)  # one scanner reports the pool's
        return sent

    async def _register(self, now: float) -> None:
        """List this worker's config generation as alive (and drop the long-gone ones)."""
        keys, retention = self.journal.keys, self.journal.settings.retention
        with redis_errors("reaper"):
            async with self.journal.client.pipeline(transaction=False) as pipe:
                pipe.zadd(keys.generations(), {self.fingerprint: now})
                pipe.zremrangebyscore(keys.generations(), "-inf", now - retention)
                pipe.expire(keys.generations(), retention)
                await pipe.execute()
        self._registered = now

    async def _check_tree(self, root: str, seen: str) -> int:
        """Handle what is due in tree ``root`` (past its hint), then settle its hint; returns how
        many runs were re-enqueued. A refused send leaves the hint due, for the next scan."""
        journal, settings = self.journal, self.journal.settings
        keys, client = journal.keys, journal.client
        deadlines, questions = keys.tree_deadlines(root), keys.tree_questions_due(root)
        now_ms = int(time.time() * 1000)
        with redis_errors("reaper"):
            async with client.pipeline(transaction=False) as pipe:
                pipe.zrangebyscore(deadlines, "-inf", now_ms, start=0, num=BATCH)
                pipe.zrangebyscore(questions, "-inf", now_ms, start=0, num=1)
                pipe.zrange(deadlines, 0, 0, withscores=True)
                pipe.zrange(questions, 0, 0, withscores=True)
                due_runs, due_questions, first_run, first_question = await pipe.execute()
        sent = 0
        for run_id in due_runs:
            sent += await self._reap(root, run_id)
        if due_questions:
            await expire_due(client, keys, [root], retention=settings.retention,
                             requeue_after=settings.requeue_after,
                             resume=lambda run_id, _root: enqueue_resume(journal, self.enqueue, run_id))
        if due_runs or due_questions:  # deadlines moved: read the earliest again
            with redis_errors("reaper"):
                async with client.pipeline(transaction=False) as pipe:
                    pipe.zrange(deadlines, 0, 0, withscores=True)
                    pipe.zrange(questions, 0, 0, withscores=True)
                    first_run, first_question = await pipe.execute()
        firsts = [int(score) for _, score in first_run + first_question]
        await journal.due.settle(root, seen, min(firsts) if firsts else None)
        return sent

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
        if status == "running":  # its lease lapsed: its worker died (or stalled past a lease)
            await self._after_a_death()
        return 1

    async def _after_a_death(self) -> None:
        """A worker died holding a run. On a Redis broker it may have taken a message with it:
        kombu pops a message (``BRPOP``) a round trip before it records it unacknowledged, and a
        ``kill -9`` in between (where a busy consumer spends much of its time) leaves it nowhere —
        not in the queue, not in the unacknowledged index, not received — and its run would wait
        for ``SENT``'s backstop (eleven minutes; issue 41). So, once per death (one reaper of the
        pool, at most once a lease), every live tree's backstops are pulled in to ``now + lease``
        (:func:`.resync.pull_backstops`, which a broker reconnect calls with ``requeue_after``): a
        run whose message is gone is re-sent then, about two leases after the death; one only late
        behind a backlog gets a duplicate its claim drops."""
        settings = self.journal.settings
        if not redis_broker(settings.broker_url):
            return  # an AMQP broker returns a dead connection's messages at once
        with contextlib.suppress(Exception):
            if await self.journal.client.set(self.journal.keys.death_pull(), self.name, nx=True,
                                             px=int(settings.lease * 1000)):
                task = asyncio.create_task(self._pull_after_death(), name="shelly-pull-after-death")
                self._pulls.add(task)
                task.add_done_callback(self._pulls.discard)

    async def _pull_after_death(self) -> None:
        try:
            pulled = await pull_backstops(self.journal, within=self.journal.settings.lease)
            logger.info("reaper: a worker died; %d deadlines pulled in (a message it took may be lost)", pulled)
        except Exception as exc:
            logger.warning("reaper: pulling deadlines in after a worker died: %s", exc)
