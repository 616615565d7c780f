"""The consumers' ledger: a run task a worker received but never finished is sent again within
about ``lease + reap_interval`` of the worker's death, not after the broker's backstop.

The gap it closes (issue 41): once the broker took a run's task, the reapers leave the run to the
broker until ``max(visibility_timeout, requeue_after)`` (660 s on defaults) — a message queued
behind a backlog is late, not lost (``scripts.SENT``). But a message the broker already *handed*
to a worker that then died — prefetched into its reserved buffer, or popped by ``BRPOP`` and not
yet claimed in the journal — is in nobody's hands: on a Redis broker kombu's unacked index returns
it only after the visibility timeout, so a batch with a worker ``kill -9``-ed sat at 1,999/2,000
for eleven minutes.

Why a ledger, and not kombu's own unacked index: kombu's Redis index records what was delivered
and when, but not to which consumer, so a live worker cannot tell a dead consumer's messages from
a busy one's (restoring by age is exactly the visibility timeout). Prefetch 1 with a
delivery-to-claim deadline would cost throughput and still leave the one prefetched message. So
each worker process keeps its own record, beside its leases:

* on receipt (Celery's ``task_received``, in the consumer, before the task is reserved or run) the
  worker adds ``run_id root`` to its ledger (a hash, one field per run, counting its messages), and
  takes away one when the task body ends (``task_postrun``; ``task_revoked`` for a task that never
  runs) — whatever the outcome: a claimed run has a lease of its own from then on, and a retried
  task is received again as a new message;
* a thread of the worker beats every quarter lease: the ledger's name in ``…{ledgers}`` scored by
  its lease's expiry (``now + lease``), the ledger's TTL refreshed (``visibility_timeout``: past
  that the broker's backstop returns the messages anyway);
* the reaper holding shard 0 of the due index reads the ledgers whose lease lapsed (one
  ``ZRANGEBYSCORE`` per scan, whatever the pool's size: O(dead workers)), takes each in one atomic
  script (so two reapers never both restore it), makes every run it lists due now
  (:meth:`.Journal.due_now`) and runs the usual ``REAP`` decision on it: a run still ``queued``
  (or ``waiting`` with its join complete, or ``running`` with its lease lapsed) is sent again,
  one that ended or that a live worker holds is left alone.

Nothing runs twice: the broker may still deliver the original message (RabbitMQ returns a dead
connection's unacknowledged messages at once; kombu's Redis index after the visibility timeout),
and its claim drops it as it drops any duplicate. A clean shutdown (SIGTERM) gives its ledger
back: Celery returns the reserved messages to the broker itself.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException, RedisError
from redis.retry import Retry

from shelly_dist.runtime.celery.settings import RuntimeSettings
from shelly_dist.state.connection import sync_client
from shelly_dist.state.keys import Keys

logger = logging.getLogger(__name__)

DOWN_PAUSE = 2.0
"""Seconds the ledger skips its writes after one failed (Redis away): the consumer thread must not
wait a socket timeout per message. A message received meanwhile is covered by the backstop only."""

DEAD_PER_SCAN = 10
"""Lapsed ledgers one scan restores (the rest wait for the next scan)."""

FINISH = """
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if n <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
return n
"""

TAKE = """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return {} end
local entries = redis.call('HGETALL', KEYS[2])
redis.call('DEL', KEYS[2])
return entries
"""
"""Take a lapsed ledger: only the reaper whose ``ZREM`` removed its name gets its entries."""


class Ledger:
    """One worker process's consumers' ledger (see the module docstring). Its methods are called
    from Celery's threads (the consumer's, the pool's), never from the event loop: each is one
    short synchronous round trip."""

    def __init__(self, settings: RuntimeSettings, keys: Keys, hostname: str,
                 connect: Callable[[], redis.Redis] | None = None) -> None:
        self.settings = settings
        self.keys = keys
        self.name = f"{hostname}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.key = keys.ledger(self.name)
        self.ttl = max(int(max(settings.visibility_timeout, settings.requeue_after)), int(settings.lease * 4))
        self._connect = connect or self._default_client
        self._client: redis.Redis | None = None
        self._finish: Any = None
        self._down_until = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _default_client(self) -> redis.Redis:
        timeout = max(0.5, min(2.0, self.settings.lease / 4))
        return sync_client(self.settings.redis_url, decode_responses=True, socket_timeout=timeout,
                           socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0),
                           client_name="shelly-ledger")

    def _redis(self) -> redis.Redis:
        with self._lock:
            if self._client is None:
                self._client = self._connect()
                self._finish = self._client.register_script(FINISH)
            return self._client

    def _write(self, what: str, op: Callable[[redis.Redis], object]) -> None:
        if time.monotonic() < self._down_until:
            return
        try:
            op(self._redis())
        except (RedisError, RedisClusterException, OSError) as exc:
            self._down_until = time.monotonic() + DOWN_PAUSE
            logger.warning("ledger: %s not recorded (%s); a message lost with this worker now waits for the "
                           "broker's backstop", what, exc)

    # -- Celery's threads ---------------------------------------------------------------------------

    def received(self, run_id: str, root: str) -> None:
        """A task message of run ``run_id`` reached this worker (not yet run, not yet claimed)."""
        self.start()

        def op(client: redis.Redis) -> None:
            with client.pipeline(transaction=False) as pipe:
                pipe.hincrby(self.key, f"{run_id} {root or run_id}", 1)
                pipe.expire(self.key, self.ttl)
                pipe.execute()

        self._write(f"receipt of run {run_id}", op)

    def finished(self, run_id: str, root: str) -> None:
        """A task body of run ``run_id`` ended here (or the task was revoked before it ran)."""
        self._write(f"end of run {run_id}'s task",
                    lambda client: self._finish(keys=[self.key], args=[f"{run_id} {root or run_id}"]))

    # -- the heartbeat ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start beating (once; from the process that consumes: Celery's main process)."""
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="shelly-ledger", daemon=True)
        self.beat()
        self._thread.start()

    def beat(self) -> None:
        """Renew this ledger's lease (``now + lease``) and its TTL."""
        def op(client: redis.Redis) -> None:
            expiry = int((time.time() + self.settings.lease) * 1000)
            with client.pipeline(transaction=False) as pipe:
                pipe.zadd(self.keys.ledgers(), {self.name: expiry})
                pipe.expire(self.keys.ledgers(), self.ttl)
                pipe.expire(self.key, self.ttl)
                pipe.execute()

        self._write("heartbeat", op)

    def _run(self) -> None:
        while not self._stop.wait(self.settings.heartbeat_interval):
            try:
                self.beat()
            except Exception:  # the thread must outlive any surprise, or the ledger lapses
                logger.exception("ledger: heartbeat failed")

    def close(self) -> None:
        """A clean shutdown: Celery gives the reserved messages back to the broker, so the ledger
        is given back too (nothing to restore)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._client is None:
            return
        try:
            with self._client.pipeline(transaction=False) as pipe:
                pipe.zrem(self.keys.ledgers(), self.name)
                pipe.delete(self.key)
                pipe.execute()
        except (RedisError, RedisClusterException, OSError) as exc:
            logger.info("ledger: not given back at shutdown (%s); the reapers restore it", exc)
        self._client.close()


async def take_lapsed(client: aioredis.Redis, keys: Keys, now_ms: int) -> dict[str, list[tuple[str, str]]]:
    """The ledgers whose lease lapsed before ``now_ms``, each taken (removed) atomically: ledger
    name → the ``(run_id, root)`` of every run task its worker received and never finished."""
    names = await client.zrangebyscore(keys.ledgers(), "-inf", now_ms, start=0, num=DEAD_PER_SCAN)
    taken: dict[str, list[tuple[str, str]]] = {}
    for name in names:
        flat = await client.eval(TAKE, 2, keys.ledgers(), keys.ledger(name), name)
        runs = []
        for field, count in zip(flat[::2], flat[1::2], strict=True):
            if int(count) > 0:
                run_id, _, root = str(field).partition(" ")
                runs.append((run_id, root or run_id))
        taken[str(name)] = runs
    return taken
