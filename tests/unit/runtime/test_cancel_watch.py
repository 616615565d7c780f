"""A worker's cancel watch holds a root only while one of its tasks is in flight here."""

from __future__ import annotations

import asyncio

from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.children.cancel import CancelWatch


async def test_a_root_is_forgotten_once_its_last_task_here_ends() -> None:
    watch = CancelWatch(None, Keys())  # type: ignore[arg-type]  # no listener: no Redis needed
    release = asyncio.Event()
    first = asyncio.create_task(release.wait())
    second = asyncio.create_task(release.wait())
    watch.track("root", first)  # type: ignore[arg-type]
    watch.track("root", second)  # type: ignore[arg-type]
    assert len(watch) == 1
    release.set()
    await asyncio.gather(first, second)
    assert len(watch) == 0 and watch.cancel_local("root") == 0


async def test_a_tracked_task_is_still_cancelled_by_its_root() -> None:
    watch = CancelWatch(None, Keys())  # type: ignore[arg-type]
    task = asyncio.create_task(asyncio.Event().wait())
    watch.track("root", task)  # type: ignore[arg-type]
    assert watch.cancel_local("root") == 1
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
