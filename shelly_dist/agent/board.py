"""What delegation needs of a task board (Shelly's ``TaskBoard`` coupling), as a protocol.

With a ``task_id`` on a delegated task, the child's instance claims the task (as a *reassign*, so
the orchestrator's own claim can be taken over) before it runs, and its outcome moves the task to
completed/failed/canceled. Cancelling the task on the board stops the child. The task board layer
sits above the agent, so it implements this protocol rather than the agent importing it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class TaskBoardHook(Protocol):
    async def claim(self, task_id: str, agent: str) -> None:
        """Assign ``task_id`` to ``agent`` (overriding another assignee); raise when impossible."""
        ...

    async def update_status(self, task_id: str, status: str) -> None:
        """Move ``task_id`` to ``status``."""
        ...

    async def wait_canceled(self, task_id: str) -> None:
        """Return once ``task_id`` is canceled (or does not exist)."""
        ...
