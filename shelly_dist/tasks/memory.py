"""The in-process task board: the embedded runtime's board, and the reference for the contract.

Tasks are kept as JSON text, so every read is a copy. A mutation runs its rule and stores the
result without awaiting in between, so on one event loop it is atomic without a lock.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from shelly_dist.state.changes import Changes, Signal
from shelly_dist.tasks.base import DEFAULT_UNCLAIMED_TIMEOUT, Task
from shelly_dist.tasks.board import BoardBase, Rule


class MemoryBoard(BoardBase):
    """A task board in this process. Use it from one event loop."""

    def __init__(self, *, unclaimed_timeout: float = DEFAULT_UNCLAIMED_TIMEOUT) -> None:
        super().__init__(unclaimed_timeout=unclaimed_timeout)
        self._data: dict[str, str] = {}
        self._signal = Signal()

    async def get(self, task_id: str) -> Task | None:
        raw = self._data.get(task_id)
        return None if raw is None else Task.model_validate_json(raw)

    def _snapshot(self) -> dict[str, Task]:
        return {task_id: Task.model_validate_json(raw) for task_id, raw in self._data.items()}

    async def _all(self) -> dict[str, Task]:
        return self._snapshot()

    async def _mutate(self, rule: Rule) -> Task:
        task = rule(self._snapshot())
        self._data[task.id] = task.model_dump_json()
        self._signal.notify()
        return task

    def changes(self) -> AbstractAsyncContextManager[Changes]:
        return self._signal.listen()
