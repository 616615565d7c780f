"""Cancellation of a whole run tree, across processes: the tree's scope of the one stop (:mod:`.stops`).

The truth is a flag on the root's record (``canceled = 1``), checked before every model call and
when any queued run starts. The wake-up is a message on one channel that every worker and
coordinator listens to: in-flight steps of that tree are cancelled at once (their model calls
aborted). Runs that wait on children are marked ``canceled`` directly, since no task runs them.

A cancel never re-creates a record that has expired (or never existed): every write here is
conditional on the record existing, so no key is left behind without its retention TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

import redis.asyncio as aioredis

from shelly_dist.cancellation import pause
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import DEFAULT_RETENTION, Keys
from shelly_dist.redisio.sharded import publish_tree
from shelly_dist.redisio.subscription import Subscription
from shelly_dist.runtime.celery.children.batch_desk import drop_runs
from shelly_dist.runtime.celery.children.stops import wake
from shelly_dist.runtime.celery.journal import TERMINAL, RunRecord
from shelly_dist.runtime.celery.journal.registry import registered
from shelly_dist.runtime.celery.journal.store import run_script

logger = logging.getLogger(__name__)

async def _mark_if_exists(client: aioredis.Redis, keys: list[str], fields: dict[str, str]) -> list[int]:
    """Set ``fields`` on each of ``keys`` (run records of one tree) that exists; the positions set.
    A plain HSET on an expired record would re-create it without a TTL (``MARK_IF_EXISTS``)."""
    if not keys:
        return []
    flat = [x for kv in fields.items() for x in kv]
    hit = await run_script(registered(client).control.mark_if_exists, keys, flat, origin="cancel")
    return [int(i) - 1 for i in hit]


async def _cancel_runs(client: aioredis.Redis, keys: Keys, runs: list[str], which: str,
                       fields: dict[str, str]) -> list[str]:
    """End as canceled the ``runs`` (of one tree) whose status, re-read inside the script, still
    allows it (``idle`` or ``orphan``: ``control_scripts.CANCEL``); the ids ended."""
    if not runs:
        return []
    hit = await run_script(registered(client).control.cancel, [keys.run(rid) for rid in runs],
                           [which, json.dumps(fields)], origin="cancel")
    return [runs[int(i) - 1] for i in hit]


async def cancel_tree(client: aioredis.Redis, keys: Keys, root: str) -> list[str]:
    """Flag ``root``'s tree as canceled, end every run no task is advancing, wake the workers.

    Returns the run ids of the tree (none when the root's record is gone). Idempotent.
    """
    with redis_errors("cancel"):
        if not await _mark_if_exists(client, [keys.run(root)], {"canceled": "1"}):
            return []
        runs = sorted(await client.smembers(keys.tree_runs(root)))
        idle = await _cancel_runs(client, keys, runs, "idle", RunRecord.canceled_fields("canceled"))
        await drop_runs(client, keys, idle, retention=DEFAULT_RETENTION)  # out of their provider batches
        # Announced one by one: a cluster client pipelines keyed commands only.
        for rid in idle:
            await publish_tree(client, keys.run_changed(rid), "canceled")
    await wake(client, keys, [root])  # the one wake-up of every stop (.stops)
    return runs


STEER_HINT = "steer:"
"""A message on the cancel channel that is no cancel: ``steer:<run id>``, a steering message was put in
that run's inbox (``children/steering.py``). Only a hint: the count on the run's record is the truth."""


ORPHAN_GRACE = 5.0
"""Seconds a canceled tree's root driven by a coordinator gets to end on its own before
:func:`end_orphaned_root` ends it (a live coordinator notices the flag within a poll interval while
it waits on children, or before its next model call)."""


async def end_orphaned_root(client: aioredis.Redis, keys: Keys, root: str, grace: float = ORPHAN_GRACE) -> bool:
    """After a cancel: a root a coordinator drives that is still ``running`` after ``grace`` seconds
    is taken for orphaned (its coordinator was killed: nothing else ever ends it) and recorded
    ``canceled``. Returns whether it did. A coordinator that was only slow ends the run itself
    as canceled when it notices the flag; this write does not stand in its way."""
    import time

    deadline = time.monotonic() + grace
    with redis_errors("cancel"):
        while True:
            status, mode = await client.hmget(keys.run(root), ["status", "mode"])
            if status is None or status in TERMINAL or mode != "coordinator":
                return False
            if time.monotonic() >= deadline:
                break
            await pause(0.2)
        ended = bool(await _cancel_runs(client, keys, [root], "orphan", RunRecord.canceled_fields(
            "canceled (its coordinator did not end it: it was killed)", at=time.time())))
        if ended:
            await publish_tree(client, keys.run_changed(root), "canceled")
    if ended:
        logger.warning("run %s: its coordinator did not end it after the cancel; recorded canceled", root)
    return ended


async def cancel_session(client: aioredis.Redis, keys: Keys, session: str) -> list[str]:
    """Cancel every root run of ``session``; returns the ids of the roots still recorded."""
    with redis_errors("cancel"):
        roots = await client.zrange(keys.session_runs(session), 0, -1)
    return [root for root in roots if await cancel_tree(client, keys, root)]


class CancelWatch:
    """Cancels this process's in-flight tasks of a tree when its root is announced as canceled;
    notes the steering hints (:data:`STEER_HINT`) of the runs in flight here.

    A root has an entry only while one of its tasks is in flight here: the last task to end
    removes it, so a worker that serves many trees keeps none of the finished ones.
    """

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self._client = client
        self._keys = keys
        self._tasks: dict[str, set[asyncio.Task[object]]] = {}
        self._steered: set[str] = set()
        self._listener: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        """Roots with a task in flight in this process."""
        return len(self._tasks)

    def track(self, root: str, task: asyncio.Task[object]) -> None:
        self._tasks.setdefault(root, set()).add(task)
        task.add_done_callback(lambda t: self._untrack(root, t))

    def _untrack(self, root: str, task: asyncio.Task[object]) -> None:
        tasks = self._tasks.get(root)
        if tasks is not None:
            tasks.discard(task)
            if not tasks:
                del self._tasks[root]
                self._steered.discard(root)

    def steered(self, run_id: str) -> bool:
        """Whether a steering message was announced for run ``run_id`` while one of its tasks was
        in flight here (a hint: whether a run about to finish reads its inbox's count once more)."""
        return run_id in self._steered

    def _hint(self, message: str) -> None:
        if message.startswith(STEER_HINT):
            run_id = message.removeprefix(STEER_HINT)
            if run_id in self._tasks:  # only runs in flight here; forgotten with their last task
                self._steered.add(run_id)

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
                    while True:  # outages are waited out inside message(); see redisio/blocking.py
                        root = await sub.message(None)
                        if root and root.startswith(STEER_HINT):
                            self._hint(root)
                            continue
                        n = self.cancel_local(root) if root else 0
                        if n:
                            logger.info("cancelled %d in-flight steps of tree %s", n, root)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # could not subscribe: try again after a short pause
                if not ready.done():
                    ready.set_result(None)
                logger.warning("cancel listener: %s; re-subscribing", exc)
                await pause(1.0)

    async def aclose(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener
            self._listener = None
