"""A loop that pauses with ``cancellation.pause`` stops when cancelled, even when a call under it
swallowed the cancellation (Python 3.11's ``asyncio.wait_for``, which redis-py sends every
command through, returns its result when the cancel lands as the command ends)."""

from __future__ import annotations

import asyncio

import pytest

from shelly_dist.cancellation import pause


async def swallowing_call(entered: asyncio.Event) -> str:
    """A call that answers instead of raising when cancelled, as ``wait_for`` does in that race."""
    entered.set()
    try:
        await asyncio.get_running_loop().create_future()  # answered only by a cancellation
    except asyncio.CancelledError:
        return "answered anyway"
    return "answered"


async def test_a_loop_pausing_with_pause_ends_when_a_call_swallowed_its_cancellation() -> None:
    entered = asyncio.Event()

    async def loop() -> None:
        while True:
            await swallowing_call(entered)
            await pause(0.01)

    task = asyncio.create_task(loop())
    await entered.wait()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5)
    assert task in done and task.cancelled()


async def test_pause_sleeps_when_no_cancellation_is_pending() -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    await pause(0.05)
    assert loop.time() - started >= 0.05


async def test_pause_raises_at_once_for_a_cancellation_already_swallowed() -> None:
    entered = asyncio.Event()

    async def one_call_then_pause() -> str:
        answer = await swallowing_call(entered)
        await pause(3600)  # raises at once: with the pending cancel, never sleeps
        return answer

    task = asyncio.create_task(one_call_then_pause())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
