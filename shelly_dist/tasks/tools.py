"""The seven task-board tools, exactly Shelly's: ``{ns}_tasks_create/list/get/claim/update/watch/cancel``.

Inputs, outputs and error texts are Shelly's (``{"id":"task-…"}``, ``"ok"``, ``title is
required``); board errors pass through with their ``tasks:`` texts. ``created_by`` and the claim's
assignee are the agent running the tool, from :mod:`shelly_dist.identity`.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shelly_dist.errors import ToolError
from shelly_dist.tasks.base import Board, Status, Task
from shelly_dist.tools import ToolBox, tool_from_model


class CreateInput(BaseModel):
    model_config = ConfigDict(json_schema_extra={"required": ["title"]})

    title: str = Field("", description="Short title of the task.")
    description: str = Field("", description="What needs doing.")
    blocked_by: list[str] = Field(default_factory=list, description="IDs of tasks that must complete first.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Free-form JSON attributes.")


class ListInput(BaseModel):
    status: Status | None = Field(None, description="Only tasks with this status.")
    assignee: str | None = Field(None, description="Only tasks assigned to this agent.")
    blocked: bool | None = Field(None, description="Only blocked (true) or unblocked (false) tasks.")


class IdInput(BaseModel):
    id: str = Field(description="The task ID (task-…).")


class UpdateInput(BaseModel):
    id: str = Field(description="The task ID (task-…).")
    status: Status | None = Field(None, description="New status.")
    description: str | None = Field(None, description="New description.")
    blocked_by: list[str] | None = Field(None, description="Replaces the list of blocking task IDs.")
    metadata: dict[str, Any] | None = Field(None, description="Merged into the task's metadata.")


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _task_json(task: Task) -> str:
    return _json(task.to_json())


def task_tools(board: Board, ns: str = "shared") -> ToolBox:
    """The seven ``{ns}_tasks_*`` tools over ``board``."""
    create_name, get_name = f"{ns}_tasks_create", f"{ns}_tasks_get"

    async def create(inp: CreateInput) -> str:
        if not inp.title:
            raise ToolError(f"{create_name}: title is required", tool=create_name)
        task = await board.create(
            inp.title, description=inp.description, blocked_by=inp.blocked_by, metadata=inp.metadata
        )
        return _json({"id": task.id})

    async def list_(inp: ListInput) -> str:
        tasks = await board.list_tasks(status=inp.status, assignee=inp.assignee, blocked=inp.blocked)
        return _json([task.to_json() for task in tasks])

    async def get(inp: IdInput) -> str:
        task = await board.get(inp.id)
        if task is None:
            raise ToolError(f'{get_name}: task "{inp.id}" not found', tool=get_name)
        return _task_json(task)

    async def claim(inp: IdInput) -> str:
        await board.claim(inp.id)
        return "ok"

    async def update(inp: UpdateInput) -> str:
        await board.update(
            inp.id,
            status=inp.status,
            description=inp.description,
            blocked_by=inp.blocked_by,
            metadata=inp.metadata,
        )
        return "ok"

    async def watch(inp: IdInput) -> str:
        return _task_json(await board.watch_completed(inp.id))

    async def cancel(inp: IdInput) -> str:
        await board.cancel(inp.id)
        return "ok"

    tools = [
        (create_name, "Create a new task on the shared task board.", CreateInput, create),
        (f"{ns}_tasks_list", "List tasks on the shared task board with optional filters.", ListInput, list_),
        (get_name, "Get a task by ID from the shared task board.", IdInput, get),
        (
            f"{ns}_tasks_claim",
            "Claim a task for the calling agent. Sets status to in_progress.",
            IdInput,
            claim,
        ),
        (
            f"{ns}_tasks_update",
            "Update a task's mutable fields (status, description, blocked_by, metadata).",
            UpdateInput,
            update,
        ),
        (
            f"{ns}_tasks_watch",
            "Block until a task reaches completed, failed or canceled status; returns the task.",
            IdInput,
            watch,
        ),
        (f"{ns}_tasks_cancel", "Cancel a pending or in-progress task.", IdInput, cancel),
    ]
    return ToolBox(
        (tool_from_model(name, desc, model, fn, group="tasks", retry_on_crash=True) for name, desc, model, fn in tools),  # type: ignore[arg-type]
        name="tasks",
    )
