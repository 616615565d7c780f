"""The top-level run ends after its tree: children it stopped have ended first.

Embedded, a run's end settles its whole tree before it returns: an interactive child still waiting
when its parent ends, or one a round's ``question_timeout`` stopped, is cancelled and awaited, so
its ``run_finished`` is published before ``Session.send`` returns. On the pool such a child is
stopped through Redis (a flag and a resume) and ends on a worker a moment later. The coordinator
waits for that moment with :func:`until_tree_ended` before it closes the root and drains the live
view's tail, so both runtimes show the same ends (``tests/spec/test_interactive.py``). The wait is
bounded: a child no worker can end (none is up) costs the view its last lines, never the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis

from shelly_dist.redisio.blocking import read_through
from shelly_dist.redisio.hub import Watch
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.journal import TERMINAL

logger = logging.getLogger(__name__)

TREE_END_LIMIT = 30.0
"""Seconds a finished root waits for the runs of its tree that are still ending (normally the one
step of a stopped child: milliseconds to a second)."""


async def unended(client: aioredis.Redis, keys: Keys, root: str) -> list[str]:
    """The runs of ``root``'s tree, the root left out, that have not ended."""
    ids = sorted(set(await client.smembers(keys.tree_runs(root))) - {root})
    if not ids:
        return []
    async with client.pipeline(transaction=False) as pipe:
        for run_id in ids:
            pipe.hget(keys.run(run_id), "status")
        statuses = await pipe.execute()
    return [run_id for run_id, status in zip(ids, statuses, strict=True)
            if status is not None and status not in TERMINAL]


async def until_tree_ended(client: aioredis.Redis, keys: Keys, root: str, watch: Callable[[], Awaitable[Watch]],
                           limit: float = TREE_END_LIMIT) -> None:
    """Return once every run below ``root`` has ended (re-read on each move of the root's channel
    ``watch()``, subscribed only if a run is left: a hint or a poll tick), or after ``limit``
    seconds with a warning."""
    deadline = time.monotonic() + limit
    wakeups: Watch | None = None
    while True:
        seen = wakeups.generation if wakeups is not None else 0
        left = await read_through("coordinator", lambda: unended(client, keys, root))
        if not left:
            return
        if wakeups is None:
            wakeups = await watch()
            continue  # re-read once subscribed: an end in between is not missed
        if time.monotonic() > deadline:
            logger.warning("coordinator: run %s ended with %d runs of its tree still ending: %s", root, len(left),
                           ", ".join(left))
            return
        await wakeups.moved(seen)
