"""The task-board coupling delegation needs, as a three-method adapter.

The agent layer (below this one) declares a ``TaskBoardHook`` protocol and never imports the
board; this adapter satisfies it by duck typing. As in Shelly's engine, ``claim`` is implemented
with **reassign**, so a delegate can take a task over from the orchestrator that created it.
"""

from __future__ import annotations

from shelly_dist.tasks.base import Board


class BoardHook:
    """``claim`` / ``update_status`` / ``wait_canceled`` for the delegation code."""

    def __init__(self, board: Board) -> None:
        self._board = board

    async def claim(self, task_id: str, agent: str) -> None:
        """Give the task to ``agent`` (reassign: overrides the current assignee)."""
        await self._board.reassign(task_id, agent)

    async def update_status(self, task_id: str, status: str) -> None:
        await self._board.update(task_id, status=status)

    async def wait_canceled(self, task_id: str) -> None:
        """Return when the task is canceled or does not exist; cancel the caller to stop waiting."""
        await self._board.watch_canceled(task_id)


def board_hook(board: Board) -> BoardHook:
    """The delegation adapter over ``board``."""
    return BoardHook(board)
