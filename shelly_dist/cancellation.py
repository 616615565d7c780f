"""Cancellation that holds when a library under the caller swallows it.

Python 3.11's ``asyncio.wait_for`` returns the inner result when its caller's cancellation and the
inner work's completion land in the same loop iteration, and redis-py sends every command through
it: a task cancelled while one of its commands is being sent carries on as if nothing happened.
``Task.cancelling()`` still counts the request. A loop that calls Redis between pauses and relies
on cancellation to stop (a ticker, a renewer, a poll) then runs for ever, and whoever awaits its
end hangs: ``Scheduler.aclose`` did, once in a few dozen stops in a test (issue 27).

Every such loop pauses with :func:`pause`, which ends the task first when a cancellation is
pending; reads that block go through ``redisio.blocking.cancellable``. Nothing here imports redis:
the lowest layers use it.
"""

from __future__ import annotations

import asyncio


def raise_if_cancelled() -> None:
    """Raise ``CancelledError`` when the current task has a cancellation pending that something
    under it swallowed (``Task.cancelling()`` still counts it)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def pause(seconds: float) -> None:
    """``asyncio.sleep(seconds)`` for loops that stop when cancelled: a cancellation that a call
    before the pause swallowed ends the task here, not never."""
    raise_if_cancelled()
    await asyncio.sleep(seconds)
