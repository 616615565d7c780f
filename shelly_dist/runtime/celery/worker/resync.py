"""After a worker's broker connection broke, the tasks the broker may have lost with it are re-sent.

Kombu's Redis transport takes a message with ``BRPOP`` and only then records it as unacknowledged.
When a consumer's connection breaks while a ``BRPOP`` reply is on its way — Redis killed or
restarted, a network cut — Redis has already removed the message and nobody holds it: the task is
gone. The journal knew the broker took it (``scripts.SENT``) and leaves the run to the broker until
the backstop, ``max(visibility_timeout, requeue_after)``: eleven minutes by default, during which a
child, or a parent whose children have all joined, would sit still (a chaos test caught a batch
item waiting so).

So when a worker's consumer reconnects (:class:`BrokerResync`, a Celery consumer step), it pulls
every deadline of every live tree that lies beyond ``now + requeue_after`` in to that time
(:func:`pull_backstops`, the ``PULL`` script). A run its task reached by then has claimed it (the
reaper finds it ``alive`` or ended); one still waiting is re-sent by the reapers (``scripts.REAP``),
and a message that was only late behind a backlog becomes a duplicate its run's claim drops. Only a
reconnect pays for it: one script per live tree, per worker whose consumer reconnected; steady
state costs nothing.

A worker killed with ``kill -9`` mid-``BRPOP`` can lose a message the same way; nobody reconnects
then, and the run waits for its backstop (the window is the reply's time in flight).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from celery import bootsteps

from shelly_dist.runtime.celery.journal import Journal
from shelly_dist.runtime.celery.journal.due import SHARDS
from shelly_dist.runtime.celery.settings import RuntimeSettings

logger = logging.getLogger(__name__)

PAGE = 500
"""Trees read per ``ZSCAN`` call of a due-index shard."""
IN_FLIGHT = 32
"""Trees pulled at a time."""
ATTEMPTS = 5
"""Sweeps tried (2 s, 4 s, … apart) while Redis still fails after the reconnect."""


async def pull_backstops(journal: Journal, *, now: float | None = None, within: float | None = None) -> int:
    """Pull every deadline later than ``now + within`` (default ``requeue_after``) of every tree in
    the due index in to that time; returns how many runs were pulled. Every tree with a deadline is
    in the due index (its hint is at or before its earliest deadline), so a ``ZSCAN`` of the shards
    finds them all; each tree is hinted at the cut, so a scanner checks it then."""
    wait = journal.settings.requeue_after if within is None else within
    cut = int(((time.time() if now is None else now) + wait) * 1000)
    script = journal.store.scripts.pull
    pulled = 0

    async def pull(root: str) -> int:
        return int(await journal.store.run_script(script, [journal.keys.tree_deadlines(root)], [cut],
                                                  hint=(root, cut)))

    for shard in range(SHARDS):
        roots = [str(member) async for member, _ in
                 journal.client.zscan_iter(journal.keys.due_shard(shard), count=PAGE)]
        for i in range(0, len(roots), IN_FLIGHT):
            pulled += sum(await asyncio.gather(*(pull(root) for root in roots[i:i + IN_FLIGHT])))
    return pulled


def redis_broker(url: str) -> bool:
    """Whether ``url`` names a Redis broker (kombu's Redis transport, the one that can lose a task)."""
    return url.split("://", 1)[0] in ("redis", "rediss", "redis+socket", "sentinel")


async def _sweep(settings: RuntimeSettings) -> int:
    from shelly_dist.redisio.connection import connect

    client = connect(settings.redis_url, client_name="shelly-worker-resync")
    try:
        return await pull_backstops(Journal(client, settings))
    finally:
        await client.aclose()


class BrokerResync(bootsteps.StartStopStep):
    """A step of the worker's Celery consumer: every start after the first is a reconnect after a
    broken broker connection, and runs :func:`pull_backstops` in a thread of its own (the consumer
    goes on consuming meanwhile). A reconnect during a sweep runs one more sweep after it."""

    requires = ("celery.worker.consumer.connection:Connection",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.starts = 0
        self._lock = threading.Lock()
        self._sweeping = False
        self._again = False

    def start(self, parent: Any) -> None:
        self.starts += 1
        settings: RuntimeSettings | None = getattr(parent.app, "shelly_settings", None)
        if self.starts == 1 or settings is None or not redis_broker(settings.broker_url):
            return  # an AMQP broker redelivers what a broken channel had not acknowledged
        with self._lock:
            if self._sweeping:
                self._again = True
                return
            self._sweeping = True
        threading.Thread(target=self._run, args=(settings,), name="shelly-broker-resync", daemon=True).start()

    def _run(self, settings: RuntimeSettings) -> None:
        while True:
            self._sweep_once(settings)
            with self._lock:
                if not self._again:
                    self._sweeping = False
                    return
                self._again = False

    @staticmethod
    def _sweep_once(settings: RuntimeSettings) -> None:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                pulled = asyncio.run(_sweep(settings))
            except Exception as exc:  # Redis still away: try again, then leave it to the backstops
                if attempt == ATTEMPTS:
                    logger.warning("broker: reconnected, but could not re-check the runs sent before (%s); "
                                   "a task lost with the connection is re-sent after its backstop", exc)
                    return
                time.sleep(2.0 * attempt)
                continue
            logger.info("broker: reconnected; %d run(s) whose task the broker had taken are checked again in "
                        "%gs, and sent again if no worker has started them (a task can be lost with a "
                        "broken connection)", pulled, settings.requeue_after)
            return
