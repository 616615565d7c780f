"""The task-board tools (Shelly behaviour 70)."""

from __future__ import annotations

import asyncio
import json

import pytest

from shelly_dist.errors import ShellyError, ToolError
from shelly_dist.identity import acting_as
from shelly_dist.tasks import MemoryBoard, task_tools
from shelly_dist.tools import ToolBox
from tests.unit.state.test_tools import call

NAMES = [f"ns_tasks_{op}" for op in ("create", "list", "get", "claim", "update", "watch", "cancel")]


@pytest.fixture
def board() -> MemoryBoard:
    return MemoryBoard(unclaimed_timeout=5)


@pytest.fixture
def box(board: MemoryBoard) -> ToolBox:
    return task_tools(board, ns="ns")


def test_exactly_seven_tools_in_the_tasks_group(box: ToolBox) -> None:
    assert box.names() == NAMES
    assert {t.group for t in box} == {"tasks"}
    assert box.get("ns_tasks_create").input_schema["required"] == ["title"]  # type: ignore[union-attr]


async def test_create_returns_the_id_and_records_the_creator(box: ToolBox, board: MemoryBoard) -> None:
    with acting_as("planner"):
        out = json.loads(await call(box, "ns_tasks_create", {"title": "write docs", "metadata": {"p": 1}}))
    assert list(out) == ["id"] and out["id"].startswith("task-")
    task = await board.get(out["id"])
    assert task is not None and (task.created_by, task.metadata) == ("planner", {"p": 1})


async def test_create_without_a_title_is_title_is_required(box: ToolBox) -> None:
    with pytest.raises(ToolError, match="title is required"):
        await call(box, "ns_tasks_create", {"description": "no title"})


async def test_claim_assigns_the_running_agent(box: ToolBox, board: MemoryBoard) -> None:
    task = await board.create("t")
    with acting_as("worker-3"):
        assert await call(box, "ns_tasks_claim", {"id": task.id}) == "ok"
    assert (await board.get(task.id)).assignee == "worker-3"  # type: ignore[union-attr]


async def test_claim_by_another_agent_errors(box: ToolBox, board: MemoryBoard) -> None:
    task = await board.create("t")
    await board.claim(task.id, "alice")
    with acting_as("bob"), pytest.raises(ShellyError, match="already assigned"):
        await call(box, "ns_tasks_claim", {"id": task.id})


async def test_list_filters_by_status(box: ToolBox, board: MemoryBoard) -> None:
    a, b = await board.create("a"), await board.create("b")
    await board.claim(b.id, "x")
    pending = json.loads(await call(box, "ns_tasks_list", {"status": "pending"}))
    assert pending == [{"id": a.id, "title": "a", "status": "pending"}]
    assert len(json.loads(await call(box, "ns_tasks_list", {}))) == 2


async def test_get_returns_the_task_json_or_not_found(box: ToolBox, board: MemoryBoard) -> None:
    task = await board.create("t", description="d")
    assert json.loads(await call(box, "ns_tasks_get", {"id": task.id})) == task.to_json()
    with pytest.raises(ToolError, match='task "task-x" not found'):
        await call(box, "ns_tasks_get", {"id": "task-x"})


async def test_update_changes_status_and_merges_metadata(box: ToolBox, board: MemoryBoard) -> None:
    task = await board.create("t", metadata={"a": 1})
    args = {"id": task.id, "status": "failed", "metadata": {"b": 2}}
    assert await call(box, "ns_tasks_update", args) == "ok"
    got = await board.get(task.id)
    assert got is not None and (got.status, got.metadata) == ("failed", {"a": 1, "b": 2})


async def test_watch_returns_the_task_json_once_terminal(box: ToolBox, board: MemoryBoard) -> None:
    task = await board.create("t")
    await board.claim(task.id, "alice")
    watcher = asyncio.create_task(call(box, "ns_tasks_watch", {"id": task.id}))
    done, _ = await asyncio.wait({watcher}, timeout=0.05)
    assert not done
    await board.update(task.id, status="completed")
    out = json.loads(await asyncio.wait_for(watcher, 10))
    assert (out["id"], out["status"], out["assignee"]) == (task.id, "completed", "alice")


async def test_cancel_is_ok_then_an_error_on_a_terminal_task(box: ToolBox, board: MemoryBoard) -> None:
    task = await board.create("t")
    assert await call(box, "ns_tasks_cancel", {"id": task.id}) == "ok"
    with pytest.raises(ShellyError, match="terminal"):
        await call(box, "ns_tasks_cancel", {"id": task.id})


@pytest.mark.parametrize("name", NAMES)
async def test_every_tool_errors_on_invalid_json(box: ToolBox, name: str) -> None:
    with pytest.raises(ToolError, match=f"{name}: invalid input"):
        await call(box, name, "{not json")
