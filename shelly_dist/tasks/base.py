"""The task board contract: Shelly's tasks, statuses and board operations.

Statuses are ``pending``, ``in_progress``, ``completed``, ``failed`` and ``canceled``; the last
three are terminal. ``Update`` may set any of the five (transitions are not validated, as in
Shelly); ``cancel`` is the guarded way to stop a task. The task JSON is Shelly's, with empty
optional fields left out (:meth:`Task.to_json`).
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

Status = Literal["pending", "in_progress", "completed", "failed", "canceled"]
STATUSES: tuple[str, ...] = ("pending", "in_progress", "completed", "failed", "canceled")
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "canceled"})

DEFAULT_UNCLAIMED_TIMEOUT = 15.0
"""Seconds ``watch_completed`` tolerates a task with no assignee (Shelly's ``unclaimedTimeout``)."""


class Task(BaseModel):
    """One task on the board, as Shelly's JSON."""

    id: str
    title: str
    description: str = ""
    status: Status
    assignee: str = ""
    blocked_by: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_by: str = ""

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def to_json(self) -> dict[str, Any]:
        """Shelly's task JSON: ``id``, ``title``, ``status`` always; the rest only when set."""
        return self.model_dump(mode="json", exclude_defaults=True)


@runtime_checkable
class Board(Protocol):
    """The task board of one session. Every mutation is atomic and wakes watchers."""

    async def create(
        self,
        title: str,
        *,
        description: str = "",
        blocked_by: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        created_by: str | None = None,
        status: str = "pending",
        assignee: str = "",
    ) -> Task:
        """A new ``pending`` task ``task-<uuid>``; ``created_by`` defaults to the running agent.

        ``status`` other than pending and any ``assignee`` are rejected (Shelly's Create); every
        ``blocked_by`` id must exist.
        """
        ...

    async def get(self, task_id: str) -> Task | None: ...

    async def list_tasks(
        self, *, status: str | None = None, assignee: str | None = None, blocked: bool | None = None
    ) -> list[Task]:
        """Tasks matching every given filter, sorted by id."""
        ...

    async def claim(self, task_id: str, agent: str | None = None) -> Task:
        """Assign to ``agent`` (default: the running agent) and set ``in_progress``; one winner.

        Errors: not found, terminal, already assigned to another agent, blocked. Claiming again as
        the same agent succeeds.
        """
        ...

    async def reassign(self, task_id: str, agent: str) -> Task:
        """Like ``claim`` but overrides any assignee (the delegation path)."""
        ...

    async def update(
        self,
        task_id: str,
        *,
        status: str | None = None,
        description: str | None = None,
        blocked_by: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Task:
        """Partial update: ``blocked_by`` is replaced, ``metadata`` merged, status any of five."""
        ...

    async def cancel(self, task_id: str) -> Task:
        """Cancel a pending or in-progress task; a terminal one is an error."""
        ...

    async def is_blocked(self, task_id: str) -> bool:
        """True when any dependency is missing or not completed."""
        ...

    async def watch_completed(self, task_id: str, timeout: float | None = None) -> Task:  # noqa: ASYNC109 - deadline is part of the contract
        """Return the task once terminal (at once if it is).

        Raises ``StoreError`` when the task does not exist, when it stays unassigned for the
        board's unclaimed timeout (the clock restarts while it has an assignee), or after
        ``timeout`` seconds.
        """
        ...

    async def watch_canceled(self, task_id: str, timeout: float | None = None) -> Task | None:  # noqa: ASYNC109 - deadline is part of the contract
        """Return when the task is canceled (the task) or does not exist (``None``).

        Raises ``StoreError`` after ``timeout`` seconds (``None``: wait forever).
        """
        ...
