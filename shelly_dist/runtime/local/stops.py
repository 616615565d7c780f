"""Stopping a subtree embedded: one mechanism, whichever stopper calls it.

Every stopper — ``delegate_fail_fast`` (a failed child's siblings), ``spawn_cancel`` (a spawned
run, or all of a stopped run's), an interactive child's delegation closing (its
``question_timeout``, or its parent's end) — calls :func:`stop`: each child's asyncio task is
cancelled *with the reason* and awaited until it has ended. The cancellation reaches the
in-flight model call or tool at once; the delegator then ends the child ``canceled`` with the
reason as its entry's error (``runtime/local/delegator.py``, ``_stopped``), its board task
settled, and the runs it spawned stopped the same way; its delegated children are cancelled with
its task (their ``delegate`` call is cancelled), so the whole subtree goes. The decisions and
texts are the agent layer's (:mod:`shelly_dist.agent.stops`); the pool's equivalent is
``runtime/celery/children/stops.py`` (a flag and a wake-up, since no task may be holding the run there).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


async def stop(tasks: Iterable[asyncio.Task[Any] | asyncio.Future[Any]], reason: str) -> None:
    """Cancel each task not done yet with ``reason`` and wait until every one has ended (its
    outcome, or error, is the caller's to read from the task)."""
    tasks = list(tasks)
    for task in tasks:
        if not task.done():
            task.cancel(reason)
    await asyncio.gather(*tasks, return_exceptions=True)
