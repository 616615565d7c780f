"""The pool's collector: each provider key's desk is worked by one elected process at a time, at a
cost that follows what is due, not what waits (DESIGN §3 rule 17).

Every worker runs a :class:`DeskRunner`. Each tick (at most :data:`TICK` apart, sooner when a desk
is due sooner) it reads the desks due now (``Keys.batch_desks``), takes the lock of each one it can
work (its config has the provider) and nobody holds, and takes one look at it —
:class:`~shelly_dist.models.batching.work.BatchWork`, what the embedded collector does, over the
desk in Redis (:class:`~shelly_dist.runtime.celery.children.batch_desk.RedisDesk`): send the window
as one vendor batch, poll what is due, fall back, deliver. The lock is renewed while the look lasts
(a vendor call can take a while) and lapses :data:`LOCK_TTL` after its holder dies; every write of
the look is fenced by it.

Here a reply goes to its run through ``model_waits.deliver`` (exactly once per wait; the run is
resumed on any worker), once the run has journaled its wait — a reply that comes first is kept and
delivered at the next look. Events go to each waiting run's session stream, and the run's record
says what it waits for (``waiting_for: openai batch batch_abc (37 requests)``, shown by ``shelly
runs``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis

from shelly_dist.cancellation import pause
from shelly_dist.chats import Message
from shelly_dist.events import Event
from shelly_dist.models.batching.desk import ProviderDesk, Request
from shelly_dist.models.batching.work import BatchWork, Lost
from shelly_dist.models.usage import Usage
from shelly_dist.observability import metrics
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.children import model_waits
from shelly_dist.runtime.celery.children.batch_desk import IDLE, ORIGIN, RedisDesk, due_desks, next_due
from shelly_dist.runtime.celery.children.batch_layer import PROVIDER_BATCH, PoolBatching
from shelly_dist.runtime.celery.journal.registry import registered
from shelly_dist.runtime.celery.journal.store import run_script
from shelly_dist.runtime.celery.journal.stream import StreamSink

logger = logging.getLogger(__name__)

TICK = 1.0
"""Most seconds between two looks at the due desks when none is due sooner (a request joining a
window that was empty waits at most this much past its ``collect_window``): two commands per tick
per worker process is an idle pool's whole cost of provider batches."""

LOCK_TTL = 15.0
"""Seconds a desk's lock lasts without renewal: a dead holder's desk is taken over after this."""

MIN_TICK = 0.1
"""Fewest seconds between two ticks (a desk due now that another process holds is left to it)."""

DESKS_PER_TICK = 16


class DeskRunner:
    """Works the due desks of this process's providers (see the module)."""

    def __init__(self, batching: PoolBatching, *, enqueue_resume: Callable[[str], Awaitable[None]],
                 requeue_after: float, name: str = "") -> None:
        self.batching = batching
        self.client: aioredis.Redis = batching.client
        self.keys: Keys = batching.keys
        self.retention = batching.retention
        self.enqueue_resume = enqueue_resume
        self.requeue_after = requeue_after
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._task: asyncio.Task[None] | None = None
        self._working: dict[str, asyncio.Task[bool]] = {}

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="shelly-batch-desks")

    async def aclose(self) -> None:
        tasks = [t for t in (self._task, *self._working.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _loop(self) -> None:
        while True:
            wait = TICK
            try:
                if self.batching.desks:
                    await self.tick()
                    first = await next_due(self.client, self.keys)
                    if first is not None:
                        wait = min(TICK, max(MIN_TICK, first - time.time()))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away: the desks wait in Redis; look again
                logger.warning("provider batches: %s", exc)
                wait = 1.0
            await pause(max(wait, 0.02))

    async def tick(self) -> int:
        """Start a look at every desk due now that this process knows, is not looking at already,
        and nobody else holds (each in a task of its own: a desk's long fallback calls do not hold
        up the others); how many were started."""
        due = [d for d in await due_desks(self.client, self.keys, time.time(), DESKS_PER_TICK)
               if d in self.batching.desks and d not in self._working]
        for d in due:
            task = asyncio.create_task(self._hold_and_look(self.batching.desks[d]), name=f"shelly-batch-desk {d}")
            self._working[d] = task
            task.add_done_callback(lambda t, d=d: self._finished(d, t))
        return len(due)

    def _finished(self, desk: str, task: asyncio.Task[bool]) -> None:
        self._working.pop(desk, None)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("provider batches: desk %s: %s", desk, task.exception())

    async def settle(self) -> None:
        """Wait for the looks under way (tests, shutdown)."""
        while self._working:
            await asyncio.gather(*self._working.values(), return_exceptions=True)

    async def _hold_and_look(self, provider: ProviderDesk) -> bool:
        desk = RedisDesk(self.client, self.keys, provider.id, self.retention, f"{self.name}:{uuid.uuid4().hex[:6]}")
        if not await desk.lock(LOCK_TTL):
            return False
        await desk.hold_off(time.time() + LOCK_TTL)  # the others leave it alone while this look lasts
        renew = asyncio.create_task(self._renew(desk))
        try:
            outlet = PoolOutlet(self.client, self.keys, self.retention, self.enqueue_resume, self.requeue_after,
                                provider)
            work = BatchWork(provider, desk, outlet)
            await work.run()
            due = await work.next_due()
            await desk.schedule(min(due, time.time() + IDLE) if due is not None else time.time() + IDLE,
                                provider.settings.collect_window)
            await _gauges(provider, desk)
        except Lost as exc:
            logger.warning("%s", exc)
        finally:
            renew.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await renew
            with contextlib.suppress(Exception):
                await desk.unlock()
        return True

    async def _renew(self, desk: RedisDesk) -> None:
        while True:
            await asyncio.sleep(LOCK_TTL / 3)
            if not await desk.lock(LOCK_TTL):
                logger.warning("provider batches: lost the lock of desk %s", desk.id)
                return
            await desk.hold_off(time.time() + LOCK_TTL)


async def _gauges(provider: ProviderDesk, desk: RedisDesk) -> None:
    """The desk as its holder last saw it, for Prometheus (labels: provider, a fixed word)."""
    flushes = await desk.flushes()
    waiting, _ = await desk.window()
    name = provider.api.provider
    metrics.BATCH_REQUESTS_WAITING.labels(name, "window").set(waiting)
    metrics.BATCH_REQUESTS_WAITING.labels(name, "sent").set(
        sum(len(f.cids) for f in flushes.values() if f.state == "polling"))
    steps = {"sending": ("open", "uploaded", "creating"), "polling": ("polling",), "delivering": ("ended",)}
    for status, states in steps.items():
        metrics.BATCHES.labels(name, status).set(sum(1 for f in flushes.values() if f.state in states))


class PoolOutlet:
    """Where a desk's results go on a pool: the waiting run (resumed on any worker), its session's
    stream, its record."""

    def __init__(self, client: aioredis.Redis, keys: Keys, retention: int,
                 enqueue_resume: Callable[[str], Awaitable[None]], requeue_after: float,
                 provider: ProviderDesk) -> None:
        self.provider = provider
        self.client = client
        self.keys = keys
        self.retention = retention
        self.enqueue_resume = enqueue_resume
        self.requeue_after = requeue_after

    async def deliver(self, who: Request, cid: str, reply: Message) -> bool:
        """Deliver ``reply`` to the run's current wait for ``cid``; False when the run has not
        journaled that wait yet (delivered at a later look). A run that ended takes nothing."""
        with redis_errors(ORIGIN):
            status, raw = await self.client.hmget(self.keys.run(who.run), ["status", "state"])
        if status is None or status in ("done", "failed", "canceled"):
            return True
        wait = (json.loads(raw).get("model_wait") if raw else None) or {}
        if wait.get("kind") != PROVIDER_BATCH or (wait.get("payload") or {}).get("custom_id") != cid:
            return False
        done = await model_waits.deliver(self.client, self.keys, who.run, str(wait["id"]), reply,
                                         retention=self.retention, requeue_after=self.requeue_after)
        if done.outcome == "resume":
            await self.enqueue_resume(who.run)
        usage = Usage.of(reply)  # no completer of a worker saw this call: counted here
        metrics.model_usage(self.provider.api.provider, self.provider.model, {
            "input": usage.input_tokens, "output": usage.output_tokens,
            "cache_read": usage.cache_read_tokens, "cache_creation": usage.cache_creation_tokens,
        }, usage.cost_usd)
        return True

    async def emit(self, calls: list[tuple[str, Request]], kind: str, data: dict[str, object]) -> None:
        """One event per waiting run, into its session's stream (one write per session)."""
        sinks: dict[str, StreamSink] = {}
        for cid, who in calls:
            sink = sinks.get(who.session)
            if sink is None:
                sink = sinks[who.session] = StreamSink(self.client, self.keys, who.session, retention=self.retention)
            sink(Event(kind=kind, agent=who.agent, run_id=who.run, session_id=who.session,
                       data={**data, "custom_id": cid}))
        for sink in sinks.values():
            await sink.flush()

    async def waiting(self, calls: list[tuple[str, Request]], text: str) -> None:
        """Say on each waiting run's record what it waits for (never re-creating an expired one)."""
        script = registered(self.client).control.mark_if_exists  # control_scripts.MARK_IF_EXISTS
        for _, who in calls:
            await run_script(script, [self.keys.run(who.run)], ["waiting_for", text], origin=ORIGIN)

