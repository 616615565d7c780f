"""The task-board contract (Shelly behaviours 64–69 and 71), run against every backend: in memory,
fakeredis and the real Redis. The unclaimed timeout is 200 ms (see conftest)."""

from __future__ import annotations

import asyncio

import pytest

from shelly_dist.errors import StoreError
from shelly_dist.identity import acting_as
from shelly_dist.tasks import Board, Task
from tests.unit.state.test_store_contract import assert_still_waiting


async def test_create_gives_unique_task_ids_with_status_pending(board: Board) -> None:
    a = await board.create("a")
    b = await board.create("b", description="d", metadata={"x": 1})
    assert a.id.startswith("task-") and b.id.startswith("task-") and a.id != b.id
    assert (a.status, b.status) == ("pending", "pending")
    assert await board.get(b.id) == b


async def test_create_records_the_running_agent_as_creator(board: Board) -> None:
    with acting_as("planner"):
        task = await board.create("t")
    assert (await board.get(task.id)).created_by == "planner"  # type: ignore[union-attr]


async def test_create_rejects_a_status_or_an_assignee(board: Board) -> None:
    with pytest.raises(StoreError, match="does not accept Status"):
        await board.create("t", status="in_progress")
    with pytest.raises(StoreError, match="does not accept Assignee"):
        await board.create("t", assignee="bob")


async def test_create_rejects_a_missing_blocked_by_id(board: Board) -> None:
    with pytest.raises(StoreError, match='blocked_by task "task-nope" not found'):
        await board.create("t", blocked_by=["task-nope"])
    assert await board.list_tasks() == []


async def test_update_rejects_a_missing_blocked_by_id_and_keeps_the_task(board: Board) -> None:
    task = await board.create("t")
    with pytest.raises(StoreError, match='blocked_by task "task-nope" not found'):
        await board.update(task.id, blocked_by=["task-nope"])
    assert (await board.get(task.id)).blocked_by == []


async def test_list_filters_by_status_assignee_and_blocked_sorted_by_id(board: Board) -> None:
    a = await board.create("a")
    b = await board.create("b", blocked_by=[a.id])
    c = await board.create("c")
    await board.claim(c.id, "bob")
    ids = sorted([a.id, b.id, c.id])
    assert [t.id for t in await board.list_tasks()] == ids
    assert [t.id for t in await board.list_tasks(status="pending")] == sorted([a.id, b.id])
    assert [t.id for t in await board.list_tasks(assignee="bob")] == [c.id]
    assert [t.id for t in await board.list_tasks(blocked=True)] == [b.id]
    assert [t.id for t in await board.list_tasks(blocked=False)] == sorted([a.id, c.id])


async def test_claim_sets_the_assignee_and_in_progress(board: Board) -> None:
    task = await board.create("t")
    claimed = await board.claim(task.id, "alice")
    assert (claimed.assignee, claimed.status) == ("alice", "in_progress")
    assert await board.get(task.id) == claimed


async def test_claim_defaults_to_the_running_agent(board: Board) -> None:
    task = await board.create("t")
    with acting_as("alice"):
        await board.claim(task.id)
    assert (await board.get(task.id)).assignee == "alice"  # type: ignore[union-attr]


async def test_the_same_agent_may_claim_again(board: Board) -> None:
    task = await board.create("t")
    await board.claim(task.id, "alice")
    assert (await board.claim(task.id, "alice")).assignee == "alice"


async def test_claim_by_another_agent_is_already_assigned(board: Board) -> None:
    task = await board.create("t")
    await board.claim(task.id, "alice")
    with pytest.raises(StoreError, match='already assigned to "alice"'):
        await board.claim(task.id, "bob")


async def test_claim_of_a_blocked_task_fails(board: Board) -> None:
    blocker = await board.create("first")
    task = await board.create("second", blocked_by=[blocker.id])
    with pytest.raises(StoreError, match="blocked"):
        await board.claim(task.id, "alice")


@pytest.mark.parametrize("status", ["completed", "failed", "canceled"])
async def test_claim_of_a_terminal_task_fails(board: Board, status: str) -> None:
    task = await board.create("t")
    await board.update(task.id, status=status)
    with pytest.raises(StoreError, match="terminal"):
        await board.claim(task.id, "alice")


async def test_claim_of_a_missing_task_is_not_found(board: Board) -> None:
    with pytest.raises(StoreError, match='task "task-x" not found') as info:
        await board.claim("task-x", "alice")
    assert info.value.task_id == "task-x"


async def test_claim_has_exactly_one_winner(board: Board) -> None:
    task = await board.create("t")
    results = await asyncio.gather(*(board.claim(task.id, f"agent-{i}") for i in range(10)), return_exceptions=True)
    winners = [r for r in results if isinstance(r, Task)]
    losers = [r for r in results if isinstance(r, StoreError)]
    assert len(winners) == 1 and len(losers) == 9
    assert all("already assigned" in str(e) for e in losers)
    assert (await board.get(task.id)).assignee == winners[0].assignee  # type: ignore[union-attr]


@pytest.mark.parametrize("previous", [None, "alice", "bob"])
async def test_reassign_overrides_any_assignee(board: Board, previous: str | None) -> None:
    task = await board.create("t")
    if previous:
        await board.claim(task.id, previous)
    moved = await board.reassign(task.id, "bob")
    assert (moved.assignee, moved.status) == ("bob", "in_progress")


async def test_reassign_of_a_terminal_or_blocked_task_fails(board: Board) -> None:
    done = await board.create("done")
    await board.update(done.id, status="completed")
    with pytest.raises(StoreError, match="terminal"):
        await board.reassign(done.id, "bob")
    blocker = await board.create("blocker")
    blocked = await board.create("blocked", blocked_by=[blocker.id])
    with pytest.raises(StoreError, match="blocked"):
        await board.reassign(blocked.id, "bob")


async def test_update_merges_metadata_and_replaces_blocked_by(board: Board) -> None:
    dep1, dep2 = await board.create("d1"), await board.create("d2")
    task = await board.create("t", metadata={"a": 1}, blocked_by=[dep1.id])
    updated = await board.update(task.id, metadata={"b": 2}, blocked_by=[dep2.id], description="new")
    assert updated.metadata == {"a": 1, "b": 2}
    assert updated.blocked_by == [dep2.id]
    assert updated.description == "new"
    assert await board.get(task.id) == updated


async def test_update_that_would_close_a_blocked_by_cycle_is_rejected(board: Board) -> None:
    a = await board.create("a")
    b = await board.create("b", blocked_by=[a.id])
    c = await board.create("c", blocked_by=[b.id])
    with pytest.raises(StoreError, match=f'task "{a.id}" cannot be blocked by "{c.id}": that makes a cycle'):
        await board.update(a.id, blocked_by=[c.id])
    assert (await board.get(a.id)).blocked_by == []


@pytest.mark.parametrize("status", ["pending", "in_progress", "completed", "failed", "canceled"])
async def test_update_accepts_any_of_the_five_statuses(board: Board, status: str) -> None:
    task = await board.create("t")
    await board.update(task.id, status="completed")
    assert (await board.update(task.id, status=status)).status == status


async def test_update_rejects_an_invalid_status_and_a_missing_task(board: Board) -> None:
    task = await board.create("t")
    with pytest.raises(StoreError, match='invalid status "done"'):
        await board.update(task.id, status="done")
    with pytest.raises(StoreError, match="not found"):
        await board.update("task-x", description="d")


async def test_completing_the_blocker_clears_is_blocked(board: Board) -> None:
    blocker = await board.create("first")
    task = await board.create("second", blocked_by=[blocker.id])
    assert await board.is_blocked(task.id) is True
    await board.update(blocker.id, status="completed")
    assert await board.is_blocked(task.id) is False
    await board.claim(task.id, "alice")


@pytest.mark.parametrize("claimed", [False, True])
async def test_cancel_works_from_pending_or_in_progress(board: Board, claimed: bool) -> None:
    task = await board.create("t")
    if claimed:
        await board.claim(task.id, "alice")
    assert (await board.cancel(task.id)).status == "canceled"


@pytest.mark.parametrize("status", ["completed", "failed", "canceled"])
async def test_cancel_of_a_terminal_task_fails(board: Board, status: str) -> None:
    task = await board.create("t")
    await board.update(task.id, status=status)
    with pytest.raises(StoreError, match="terminal"):
        await board.cancel(task.id)


async def test_a_canceled_task_cannot_be_claimed_or_reassigned(board: Board) -> None:
    task = await board.create("t")
    await board.cancel(task.id)
    for attempt in (board.claim(task.id, "a"), board.reassign(task.id, "a")):
        with pytest.raises(StoreError, match="terminal"):
            await attempt


@pytest.mark.parametrize("status", ["completed", "failed", "canceled"])
async def test_watch_completed_returns_at_once_for_a_terminal_task(board: Board, status: str) -> None:
    task = await board.create("t")
    await board.update(task.id, status=status)
    assert (await board.watch_completed(task.id, timeout=5)).status == status


async def test_watch_completed_blocks_until_completed(board: Board) -> None:
    task = await board.create("t")
    await board.claim(task.id, "alice")
    watcher = asyncio.create_task(board.watch_completed(task.id, timeout=10))
    await assert_still_waiting(watcher)
    await board.update(task.id, status="completed", metadata={"r": 1})
    done = await asyncio.wait_for(watcher, 10)
    assert (done.status, done.metadata) == ("completed", {"r": 1})


async def test_watch_completed_returns_on_cancel(board: Board) -> None:
    task = await board.create("t")
    await board.claim(task.id, "alice")
    watcher = asyncio.create_task(board.watch_completed(task.id, timeout=10))
    await assert_still_waiting(watcher)
    await board.cancel(task.id)
    assert (await asyncio.wait_for(watcher, 10)).status == "canceled"


async def test_watch_completed_of_a_missing_task_is_not_found(board: Board) -> None:
    with pytest.raises(StoreError, match="not found"):
        await board.watch_completed("task-x")


async def test_cancelling_watch_completed_propagates(board: Board) -> None:
    task = await board.create("t")
    await board.claim(task.id, "alice")
    watcher = asyncio.create_task(board.watch_completed(task.id))
    await assert_still_waiting(watcher)
    watcher.cancel()
    with pytest.raises(asyncio.CancelledError):
        await watcher


async def test_watch_completed_fails_when_nobody_claims(board: Board) -> None:
    task = await board.create("t")
    with pytest.raises(StoreError, match=r"has no assignee after 0\.2s; no agent appears available"):
        await board.watch_completed(task.id, timeout=10)


async def test_claiming_restarts_the_unclaimed_clock(board: Board) -> None:
    """Shelly behaviour 68: claim at 50 ms, complete at 350 ms (past the 200 ms limit) succeeds."""
    task = await board.create("t")
    watcher = asyncio.create_task(board.watch_completed(task.id, timeout=10))
    await assert_still_waiting(watcher)  # 50 ms unassigned
    await board.claim(task.id, "alice")
    await asyncio.sleep(0.3)  # the scenario: time passes while assigned, beyond the limit
    await board.update(task.id, status="completed")
    assert (await asyncio.wait_for(watcher, 10)).status == "completed"


async def test_watch_completed_times_out_with_a_store_error(board: Board) -> None:
    task = await board.create("t")
    await board.claim(task.id, "alice")
    with pytest.raises(StoreError, match=r"timed out after 0\.1s"):
        await board.watch_completed(task.id, timeout=0.1)


async def test_create_does_not_wake_completion_watchers(board: Board) -> None:
    task = await board.create("t")
    await board.claim(task.id, "alice")
    watcher = asyncio.create_task(board.watch_completed(task.id, timeout=10))
    await assert_still_waiting(watcher)
    await board.create("another")
    await assert_still_waiting(watcher)
    await board.update(task.id, status="failed")
    assert (await asyncio.wait_for(watcher, 10)).status == "failed"


async def test_five_watchers_all_return_on_completion(board: Board) -> None:
    task = await board.create("t")
    await board.claim(task.id, "alice")
    watchers = [asyncio.create_task(board.watch_completed(task.id, timeout=10)) for _ in range(5)]
    await assert_still_waiting(watchers[-1])
    await board.update(task.id, status="completed")
    results = await asyncio.wait_for(asyncio.gather(*watchers), 10)
    assert {t.status for t in results} == {"completed"}


async def test_watch_canceled_returns_on_cancel(board: Board) -> None:
    task = await board.create("t")
    watcher = asyncio.create_task(board.watch_canceled(task.id, timeout=10))
    await assert_still_waiting(watcher)
    await board.update(task.id, status="completed")
    await assert_still_waiting(watcher)
    await board.update(task.id, status="pending")
    await board.cancel(task.id)
    result = await asyncio.wait_for(watcher, 10)
    assert result is not None and result.status == "canceled"


async def test_watch_canceled_returns_at_once_when_canceled_or_missing(board: Board) -> None:
    task = await board.create("t")
    await board.cancel(task.id)
    assert (await board.watch_canceled(task.id, timeout=5)).status == "canceled"  # type: ignore[union-attr]
    assert await board.watch_canceled("task-x", timeout=5) is None


async def test_cancelling_watch_canceled_propagates(board: Board) -> None:
    task = await board.create("t")
    watcher = asyncio.create_task(board.watch_canceled(task.id))
    await assert_still_waiting(watcher)
    watcher.cancel()
    with pytest.raises(asyncio.CancelledError):
        await watcher


def test_task_json_leaves_out_empty_optional_fields() -> None:
    task = Task(id="task-1", title="t", status="pending")
    assert task.to_json() == {"id": "task-1", "title": "t", "status": "pending"}
    full = task.model_copy(update={"assignee": "a", "blocked_by": ["task-0"], "metadata": {"k": 1}})
    assert full.to_json()["blocked_by"] == ["task-0"]
