"""Shelly's task-board semantics, written once over three storage primitives.

Both boards (in memory, in Redis) implement only ``get``, ``_all``, ``_mutate`` and ``changes``;
everything a user can observe (the error texts, claim rules, the unclaimed timeout) is here, so
the two cannot drift. ``_mutate`` hands a rule a consistent view of every task and atomically
stores the one task the rule returns; a rule raises ``StoreError`` to abort, and may run more than
once (Redis retries it on a conflicting write), so rules are pure.

Error texts are Shelly's, prefixed ``tasks:``; the words tests and prompts rely on ("not found",
"terminal", "already assigned", "blocked", "no assignee", "invalid status") are contracts.
"""

from __future__ import annotations

import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

from shelly_dist.errors import StoreError
from shelly_dist.identity import agent_name
from shelly_dist.redisio.blocking import read_through
from shelly_dist.state.changes import Changes, deadline_after, seconds_left, soonest
from shelly_dist.tasks.base import DEFAULT_UNCLAIMED_TIMEOUT, STATUSES, Task

Tasks = Mapping[str, Task]
Rule = Callable[[dict[str, Task]], Task]


def _not_found(task_id: str) -> StoreError:
    return StoreError(f'tasks: task "{task_id}" not found', task_id=task_id)


def _require(tasks: Tasks, task_id: str) -> Task:
    task = tasks.get(task_id)
    if task is None:
        raise _not_found(task_id)
    return task


def _cycle(tasks: Tasks, task_id: str, blocked_by: list[str]) -> list[str] | None:
    """The chain ``task_id → … → task_id`` that blocking ``task_id`` by ``blocked_by`` would close
    (every task in it would wait for itself forever), else None."""
    stack = [(dep, [task_id, dep]) for dep in blocked_by]
    seen: set[str] = set()
    while stack:
        current, path = stack.pop()
        if current == task_id:
            return path
        if current in seen or current not in tasks:
            continue
        seen.add(current)
        stack += [(dep, [*path, dep]) for dep in tasks[current].blocked_by]
    return None


def depends_on_unfinished(tasks: Tasks, task: Task) -> bool:
    """True when any dependency of ``task`` is missing or not completed."""
    return any(dep not in tasks or tasks[dep].status != "completed" for dep in task.blocked_by)


def _check_status(status: str) -> None:
    if status not in STATUSES:
        raise StoreError(f'tasks: invalid status "{status}"')


def _assigned(tasks: Tasks, task_id: str, agent: str, *, override: bool) -> Task:
    task = _require(tasks, task_id)
    if task.terminal:
        raise StoreError(f'tasks: task "{task_id}" is in terminal state "{task.status}"', task_id=task_id)
    if not override and task.assignee and task.assignee != agent:
        raise StoreError(f'tasks: task "{task_id}" is already assigned to "{task.assignee}"', task_id=task_id)
    if depends_on_unfinished(tasks, task):
        raise StoreError(f'tasks: task "{task_id}" is blocked', task_id=task_id)
    return task.model_copy(update={"assignee": agent, "status": "in_progress"})


class BoardBase(ABC):
    """The whole board contract (:class:`~shelly_dist.tasks.base.Board`) over storage primitives."""

    def __init__(self, *, unclaimed_timeout: float = DEFAULT_UNCLAIMED_TIMEOUT) -> None:
        self.unclaimed_timeout = unclaimed_timeout

    # -- storage primitives ------------------------------------------------------------------

    @abstractmethod
    async def get(self, task_id: str) -> Task | None:
        """The task, or ``None``."""

    @abstractmethod
    async def _all(self) -> dict[str, Task]:
        """Every task, by id (copies)."""

    @abstractmethod
    async def _mutate(self, rule: Rule) -> Task:
        """Atomically store ``rule(all tasks)`` and wake watchers; ``rule`` may run repeatedly."""

    @abstractmethod
    def changes(self) -> AbstractAsyncContextManager[Changes]:
        """A subscription to change hints (entered before a watch's first read)."""

    # -- operations --------------------------------------------------------------------------

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
        if status not in ("", "pending"):
            raise StoreError(f'tasks: Create does not accept Status "{status}"; new tasks always start as "pending"')
        if assignee:
            raise StoreError(
                f'tasks: Create does not accept Assignee "{assignee}"; use Claim or Reassign after creation'
            )
        task = Task(
            id=f"task-{uuid.uuid4()}",
            title=title,
            description=description,
            status="pending",
            blocked_by=list(blocked_by or []),
            metadata=dict(metadata or {}),
            created_by=agent_name() if created_by is None else created_by,
        )

        def rule(tasks: dict[str, Task]) -> Task:
            for dep in task.blocked_by:
                if dep not in tasks:
                    raise StoreError(f'tasks: blocked_by task "{dep}" not found', task_id=dep)
            return task

        return await self._mutate(rule)

    async def list_tasks(
        self, *, status: str | None = None, assignee: str | None = None, blocked: bool | None = None
    ) -> list[Task]:
        tasks = await self._all()
        return [
            task
            for task_id, task in sorted(tasks.items())
            if (status is None or task.status == status)
            and (assignee is None or task.assignee == assignee)
            and (blocked is None or depends_on_unfinished(tasks, task) == blocked)
        ]

    async def is_blocked(self, task_id: str) -> bool:
        tasks = await self._all()
        task = tasks.get(task_id)
        return task is not None and depends_on_unfinished(tasks, task)

    async def claim(self, task_id: str, agent: str | None = None) -> Task:
        agent = agent_name() if agent is None else agent
        if not agent:
            raise StoreError(f'tasks: cannot claim task "{task_id}": no agent name', task_id=task_id)
        return await self._mutate(lambda tasks: _assigned(tasks, task_id, agent, override=False))

    async def reassign(self, task_id: str, agent: str) -> Task:
        if not agent:
            raise StoreError(f'tasks: cannot reassign task "{task_id}": no agent name', task_id=task_id)
        return await self._mutate(lambda tasks: _assigned(tasks, task_id, agent, override=True))

    async def update(
        self,
        task_id: str,
        *,
        status: str | None = None,
        description: str | None = None,
        blocked_by: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Task:
        if status is not None:
            _check_status(status)
        if blocked_by is not None and task_id in blocked_by:
            raise StoreError(f'tasks: task "{task_id}" cannot be blocked by itself', task_id=task_id)

        def rule(tasks: dict[str, Task]) -> Task:
            task = _require(tasks, task_id)
            changes: dict[str, Any] = {}
            if status is not None:
                changes["status"] = status
            if description is not None:
                changes["description"] = description
            if blocked_by is not None:
                for dep in blocked_by:  # as Create: a missing dependency would block the task forever
                    if dep not in tasks:
                        raise StoreError(f'tasks: blocked_by task "{dep}" not found', task_id=dep)
                cycle = _cycle(tasks, task_id, blocked_by)
                if cycle is not None:
                    raise StoreError(f'tasks: task "{task_id}" cannot be blocked by "{cycle[1]}": that makes a '
                                     f'cycle ({" → ".join(cycle)})', task_id=task_id)
                changes["blocked_by"] = list(blocked_by)
            if metadata is not None:
                changes["metadata"] = {**task.metadata, **metadata}
            return task.model_copy(update=changes)

        return await self._mutate(rule)

    async def cancel(self, task_id: str) -> Task:
        def rule(tasks: dict[str, Task]) -> Task:
            task = _require(tasks, task_id)
            if task.terminal:
                raise StoreError(
                    f'tasks: cannot cancel task "{task_id}": already in terminal state "{task.status}"',
                    task_id=task_id,
                )
            return task.model_copy(update={"status": "canceled"})

        return await self._mutate(rule)

    # -- watches -----------------------------------------------------------------------------

    async def watch_completed(self, task_id: str, timeout: float | None = None) -> Task:  # noqa: ASYNC109 - deadline is part of the contract
        deadline = deadline_after(timeout)
        unassigned_since: float | None = None
        async with self.changes() as changes:
            while True:
                task = await read_through("tasks", lambda: self.get(task_id), until=deadline)
                if task is None:
                    raise _not_found(task_id)
                if task.terminal:
                    return task
                unclaimed_left: float | None = None
                if task.assignee:
                    unassigned_since = None
                else:
                    now = time.monotonic()
                    unassigned_since = now if unassigned_since is None else unassigned_since
                    unclaimed_left = self.unclaimed_timeout - (now - unassigned_since)
                    if unclaimed_left <= 0:
                        raise StoreError(
                            f'tasks: task "{task_id}" has no assignee after {self.unclaimed_timeout:g}s; '
                            "no agent appears available to claim it",
                            task_id=task_id,
                        )
                await changes.wait(soonest(self._time_left(deadline, timeout, task_id), unclaimed_left))

    async def watch_canceled(self, task_id: str, timeout: float | None = None) -> Task | None:  # noqa: ASYNC109 - deadline is part of the contract
        deadline = deadline_after(timeout)
        async with self.changes() as changes:
            while True:
                task = await read_through("tasks", lambda: self.get(task_id), until=deadline)
                if task is None or task.status == "canceled":
                    return task
                await changes.wait(self._time_left(deadline, timeout, task_id))

    @staticmethod
    def _time_left(deadline: float | None, timeout: float | None, task_id: str) -> float | None:
        left = seconds_left(deadline)
        if left == 0.0:
            raise StoreError(f'tasks: timed out after {timeout:g}s watching task "{task_id}"', task_id=task_id)
        return left
