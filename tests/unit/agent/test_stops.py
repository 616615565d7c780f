"""The stop texts and the board watch both runtimes use around a delegated child."""

from __future__ import annotations

import asyncio

import pytest

from shelly_dist.agent import ChildRequest, DelegateEntry
from shelly_dist.agent.stops import SIBLING_FAILED, BoardCancelScope, stops_siblings
from shelly_dist.errors import RunCancelled


class Board:
    def __init__(self) -> None:
        self.canceled = asyncio.Event()

    async def claim(self, task_id: str, agent: str) -> None: ...

    async def update_status(self, task_id: str, status: str) -> None: ...

    async def wait_canceled(self, task_id: str) -> None:
        await self.canceled.wait()


async def test_cancelling_the_board_task_stops_the_block_with_task_canceled():
    board = Board()
    started = asyncio.Event()

    async def child() -> None:
        async with BoardCancelScope(board, "task-1"):
            started.set()
            await asyncio.Event().wait()  # an in-flight model call

    task = asyncio.create_task(child())
    await started.wait()
    board.canceled.set()
    with pytest.raises(RunCancelled, match="task canceled"):
        await asyncio.wait_for(task, 5)


async def test_a_task_already_canceled_stops_the_block_at_once():
    board = Board()
    board.canceled.set()
    with pytest.raises(RunCancelled, match="task canceled"):
        async with BoardCancelScope(board, "task-1"):
            await asyncio.Event().wait()


async def test_a_cancel_from_outside_still_propagates_as_cancellation():
    board = Board()
    started = asyncio.Event()

    async def child() -> None:
        async with BoardCancelScope(board, "task-1"):
            started.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(child())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_without_a_task_id_the_scope_watches_nothing():
    async with BoardCancelScope(Board(), None) as scope:
        await asyncio.sleep(0)
    assert not scope.fired


def _request(fail_fast: bool) -> ChildRequest:
    return ChildRequest(key="c:0", tool_call_id="c", index=0, agent="w", task="t", depth=1, visited=["w"],
                        parent_run_id="p", parent_agent="lead", fail_fast=fail_fast)


def test_only_a_failure_under_fail_fast_stops_siblings_and_a_stopped_child_stops_nobody():
    assert stops_siblings(_request(True), DelegateEntry(agent="w", error="boom"))
    assert not stops_siblings(_request(False), DelegateEntry(agent="w", error="boom"))
    assert not stops_siblings(_request(True), DelegateEntry(agent="w", result="fine"))
    assert not stops_siblings(_request(True), DelegateEntry(agent="w", error=SIBLING_FAILED))
