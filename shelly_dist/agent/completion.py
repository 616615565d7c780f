"""``task_complete``: how a delegated child reports that it is done. The first call wins."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field

from shelly_dist.agent.records import CompletionResult
from shelly_dist.tools import Tool
from shelly_dist.tools.schema import shared_schema
from shelly_dist.tools.tool import parse_input


class TaskCompleteInput(BaseModel):
    status: str = Field(description='"completed" or "failed".')
    summary: str = Field(description="What was done, or why it could not be done.")
    files_modified: list[str] | None = Field(default=None, description="Files created or changed.")
    tests_run: list[str] | None = Field(default=None, description="Tests run and their outcome.")
    caveats: str | None = Field(default=None, description="Anything the delegating agent must know.")


def task_complete_tool(get: Callable[[], CompletionResult | None], set_: Callable[[CompletionResult], None]) -> Tool:
    """The tool, bound to one run's completion slot through ``get``/``set_``."""

    async def handler(arguments: str) -> str:
        data = parse_input("task_complete", TaskCompleteInput, arguments)
        if data.status not in ("completed", "failed"):
            raise ValueError(f'task_complete: status must be "completed" or "failed", got "{data.status}"')
        if get() is not None:
            return "Task already marked — duplicate call ignored."
        set_(CompletionResult.model_validate(data.model_dump()))
        return f"Task marked as {data.status}."

    return Tool(
        "task_complete",
        "Report that your delegated task is finished (or failed). This ends your work.",
        shared_schema(TaskCompleteInput),
        handler,
        group="agents",
        retry_on_crash=True,  # a second call is ignored
    )
