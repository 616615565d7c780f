"""The chat's side panels: the sub-agent tree and the task board.

The sub-agent panel draws the live view's :class:`~shelly_dist.cli.live.Board` (one row per run
instance, fed by the session's events, so children on other machines appear with their worker):
instance, status, worker, tokens, cost, and what it is doing or why it failed. The task panel
draws the session's task board as it is read (embedded in memory, on the pool from Redis).
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from shelly_dist.cli.live import Board
from shelly_dist.tasks import Task

STATUS_STYLE = {"running": "yellow", "waiting": "cyan", "done": "green", "failed": "red", "canceled": "magenta",
                "pending": "", "in_progress": "yellow", "completed": "green", "blocked": "red"}


def subagent_table(board: Board) -> Table:
    """The runs of the session, each under its parent by depth."""
    table = Table(box=None, pad_edge=False, header_style="bold", expand=True)
    for column in ("agent", "status", "worker", "tokens", "cost", "doing / why"):
        table.add_column(column, justify="right" if column in ("tokens", "cost") else "left",
                         no_wrap=column != "doing / why", overflow="fold")
    for row in board.rows.values():
        table.add_row(Text("  " * row.depth + row.name), Text(row.status, style=STATUS_STYLE.get(row.status, "")),
                      Text(row.worker or "-"), str(row.tokens), f"${row.cost:.4f}", Text(row.action))
    return table


def task_table(tasks: list[Task]) -> Table:
    """The session's board: id, status, assignee, title."""
    table = Table(box=None, pad_edge=False, header_style="bold", expand=True)
    for column in ("task", "status", "assignee", "title"):
        table.add_column(column, overflow="fold")
    for task in tasks:
        table.add_row(task.id, Text(str(task.status), style=STATUS_STYLE.get(str(task.status), "")),
                      task.assignee or "-", task.title)
    return table


class SubAgentPanel(Static):
    """``/subagents``: the live tree of the session's runs."""

    DEFAULT_CSS = "SubAgentPanel { height: auto; max-height: 20; border: round $accent; padding: 0 1; }"

    def __init__(self, board: Board) -> None:
        super().__init__(id="subagents")
        self.board = board
        self.border_title = "sub-agents"

    def refresh_rows(self) -> None:
        if not self.board.rows:
            self.update(Text("no sub-agents yet", style="dim"))
        else:
            self.update(subagent_table(self.board))


class TaskPanel(Static):
    """``/tasks``: the session's task board."""

    DEFAULT_CSS = "TaskPanel { height: auto; max-height: 16; border: round $secondary; padding: 0 1; }"

    def __init__(self) -> None:
        super().__init__(id="tasks")
        self.border_title = "tasks"
        self.tasks: list[Task] = []

    def show(self, tasks: list[Task]) -> None:
        self.tasks = tasks
        self.update(task_table(tasks) if tasks else Text("the board is empty", style="dim"))
