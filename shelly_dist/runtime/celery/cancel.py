"""Cancellation of a whole run tree, across processes.

The truth is a flag on the root's record (``canceled = 1``), checked before every model call and
when any queued run starts. The wake-up is a message on one channel that every worker and
coordinator listens to: in-flight steps of that tree are cancelled at once (their model calls
aborted). Runs that wait on children are marked ``canceled`` directly, since no task runs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict

import redis.asyncio as aioredis

from shelly_dist.runtime.celery.journal import TERMINAL
from shelly_dist.state.connection import redis_errors
from shelly_dist.state.keys import Keys
from shelly_dist.state.subscription import Subscription

logger = logging.getLogger(__name__)


async def cancel_tree(client: aioredis.Redis, keys: Keys, root: str) -> list[str]:
    """Flag ``root``'s tree as canceled, end every run no task is advancing, wake the workers.

    Returns the run ids of the tree. Idempotent.
    """
    with redis_errors("cancel"):
        await client.hset(keys.run(root), "canceled", "1")
        runs = sorted(await client.smembers(keys.tree_runs(root)))
        async with client.pipeline(transaction=False) as pipe:
            for rid in runs:
                pipe.hget(keys.run(rid), "status")
            statuses = await pipe.execute()
        async with client.pipeline(transaction=False) as pipe:
            for rid, status in zip(runs, statuses, strict=True):
                if status is not None and status not in TERMINAL and status != "running":
                    pipe.hset(keys.run(rid), mapping={"status": "canceled", "error": "canceled"})
                    pipe.publish(keys.run_changed(rid), "canceled")
            pipe.publish(keys.cancel_channel(), root)
            await pipe.execute()
    return runs


async def cancel_session(client: aioredis.Redis, keys: Keys, session: str) -> list[str]:
    """Cancel every root run of ``session``; returns the root ids."""
    with redis_errors("cancel"):
        roots = await client.zrange(keys.session_runs(session), 0, -1)
    for root in roots:
        await cancel_tree(client, keys, root)
    return list(roots)


class CancelWatch:
    """Cancels this process's in-flight tasks of a tree when its root is announced as canceled."""

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self._client = client
        self._keys = keys
        self._tasks: dict[str, set[asyncio.Task[object]]] = defaultdict(set)
        self._listener: asyncio.Task[None] | None = None

    def track(self, root: str, task: asyncio.Task[object]) -> None:
        self._tasks[root].add(task)
        task.add_done_callback(lambda t: self._tasks[root].discard(t))

    def cancel_local(self, root: str) -> int:
        tasks = list(self._tasks.get(root, ()))
        for t in tasks:
            t.cancel()
        return len(tasks)

    async def start(self) -> None:
        if self._listener is None:
            ready = asyncio.get_running_loop().create_future()
            self._listener = asyncio.create_task(self._listen(ready))
            await asyncio.wait_for(ready, 10)

    async def _listen(self, ready: asyncio.Future[None]) -> None:
        while True:
            try:
                async with Subscription(self._client, self._keys.cancel_channel()) as sub:
                    if not ready.done():
                        ready.set_result(None)
                    while True:  # outages are waited out inside message(); see state/blocking.py
                        root = await sub.message(None)
                        n = self.cancel_local(root) if root else 0
                        if n:
                            logger.info("cancelled %d in-flight steps of tree %s", n, root)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # could not subscribe: try again after a short pause
                if not ready.done():
                    ready.set_result(None)
                logger.warning("cancel listener: %s; re-subscribing", exc)
                await asyncio.sleep(1.0)

    async def aclose(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener
            self._listener = None
