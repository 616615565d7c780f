"""``shelly tasks list|get|create|claim|update|cancel|watch``: a session's task board."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import click

from shelly_dist.cli.backend import echo_json, parse_value, shared_stores
from shelly_dist.cli.errors import run_async
from shelly_dist.cli.options import session_scoped
from shelly_dist.errors import StoreError
from shelly_dist.tasks import STATUSES, Board, Task


def _with_board(config_path: str | None, shelly_dir: str, session: str, op: Callable[[Board], Awaitable[Any]]) -> None:
    async def main() -> Any:
        async with shared_stores(config_path, shelly_dir, "tasks") as stores:
            result = await op(stores.board(session))
        if isinstance(result, Task):
            return result.to_json()
        if isinstance(result, list):
            return [t.to_json() for t in result]
        return result

    echo_json(run_async(main()))


@click.group("tasks")
def tasks_group() -> None:
    """Inspect and change a session's task board (needs the Redis backend)."""


@tasks_group.command("list")
@click.option("--status", type=click.Choice(list(STATUSES)), default=None)
@click.option("--assignee", default=None)
@session_scoped
def list_(status: str | None, assignee: str | None, session_id: str, config_path: str | None, shelly_dir: str) -> None:
    """Print the tasks as a JSON array (sorted by id)."""

    async def op(board: Board) -> Any:
        return await board.list_tasks(status=status, assignee=assignee)

    _with_board(config_path, shelly_dir, session_id, op)


@tasks_group.command("get")
@click.argument("task_id")
@session_scoped
def get(task_id: str, session_id: str, config_path: str | None, shelly_dir: str) -> None:
    """Print one task (exit 1 when missing)."""

    async def op(board: Board) -> Any:
        task = await board.get(task_id)
        if task is None:
            raise StoreError(f'tasks: task "{task_id}" not found in session {session_id}', task_id=task_id)
        return task

    _with_board(config_path, shelly_dir, session_id, op)


@tasks_group.command("create")
@click.argument("title")
@click.option("--description", default="")
@click.option("--blocked-by", multiple=True, help="A task id this one waits for (repeatable).")
@click.option("--metadata", default=None, help="A JSON object.")
@session_scoped
def create(
    title: str,
    description: str,
    blocked_by: tuple[str, ...],
    metadata: str | None,
    session_id: str,
    config_path: str | None,
    shelly_dir: str,
) -> None:
    """Create a pending task and print it."""
    meta = parse_value(metadata) if metadata else None
    if meta is not None and not isinstance(meta, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--metadata")

    async def op(board: Board) -> Any:
        return await board.create(
            title, description=description, blocked_by=list(blocked_by), metadata=meta, created_by="cli"
        )

    _with_board(config_path, shelly_dir, session_id, op)


@tasks_group.command("claim")
@click.argument("task_id")
@click.option("--agent", default="cli", show_default=True, help="Who claims it.")
@session_scoped
def claim(task_id: str, agent: str, session_id: str, config_path: str | None, shelly_dir: str) -> None:
    """Claim a task for AGENT (one winner)."""

    async def op(board: Board) -> Any:
        return await board.claim(task_id, agent)

    _with_board(config_path, shelly_dir, session_id, op)


@tasks_group.command("update")
@click.argument("task_id")
@click.option("--status", type=click.Choice(list(STATUSES)), default=None)
@click.option("--description", default=None)
@session_scoped
def update(
    task_id: str, status: str | None, description: str | None, session_id: str, config_path: str | None, shelly_dir: str
) -> None:
    """Change a task's status and/or description."""

    async def op(board: Board) -> Any:
        return await board.update(task_id, status=status, description=description)

    _with_board(config_path, shelly_dir, session_id, op)


@tasks_group.command("cancel")
@click.argument("task_id")
@session_scoped
def cancel(task_id: str, session_id: str, config_path: str | None, shelly_dir: str) -> None:
    """Cancel a pending or in-progress task (stops the agent working on it)."""

    async def op(board: Board) -> Any:
        return await board.cancel(task_id)

    _with_board(config_path, shelly_dir, session_id, op)


@tasks_group.command("watch")
@click.argument("task_id")
@click.option("--timeout", type=float, default=None, help="Seconds to wait (default: forever).")
@session_scoped
def watch(task_id: str, timeout: float | None, session_id: str, config_path: str | None, shelly_dir: str) -> None:
    """Wait until a task is completed, failed or canceled, then print it."""

    async def op(board: Board) -> Any:
        return await board.watch_completed(task_id, timeout)

    _with_board(config_path, shelly_dir, session_id, op)
