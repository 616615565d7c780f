"""The delegation adapter: claim is a reassign, status updates, and waiting for a cancel."""

from __future__ import annotations

import asyncio

from shelly_dist.tasks import MemoryBoard, board_hook


async def test_hook_claim_takes_the_task_over_from_another_agent() -> None:
    board = MemoryBoard()
    task = await board.create("t")
    await board.claim(task.id, "orchestrator")
    await board_hook(board).claim(task.id, "coder-1")
    got = await board.get(task.id)
    assert got is not None and (got.assignee, got.status) == ("coder-1", "in_progress")


async def test_hook_update_status_sets_the_status() -> None:
    board = MemoryBoard()
    task = await board.create("t")
    await board_hook(board).update_status(task.id, "completed")
    assert (await board.get(task.id)).status == "completed"  # type: ignore[union-attr]


async def test_hook_wait_canceled_returns_on_cancel_or_a_missing_task() -> None:
    board = MemoryBoard()
    hook = board_hook(board)
    task = await board.create("t")
    waiter = asyncio.create_task(hook.wait_canceled(task.id))
    done, _ = await asyncio.wait({waiter}, timeout=0.05)
    assert not done
    await board.cancel(task.id)
    assert await asyncio.wait_for(waiter, 10) is None
    await asyncio.wait_for(hook.wait_canceled("task-missing"), 10)
