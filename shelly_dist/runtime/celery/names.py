"""The names that cross processes: the tasks' names, their keyword arguments, the inspect command.

They are literal strings (``shelly.run_agent``, ``shelly.resume_agent``): moving code never
orphans a message already in a queue. Their keyword arguments (agent, depth, session, preview)
exist for Flower: they are what an operator reads in the task list; the worker reads only the
positional ``[run_id, root]`` (and ``session``/``agent``, to number a fresh instance with its claim).

A module of its own, importing nothing of the package, because every room sends tasks by name:
the children's dispatch, the worker's reaper, the client's submit. Kept beside the code that
registered the tasks, the names made the executor and the spawns import each other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

RUN_AGENT = "shelly.run_agent"
RESUME_AGENT = "shelly.resume_agent"

SHELLY_INFO = "shelly_info"
"""The remote-control command a worker answers with its facts (``worker/control.py``) and a
client broadcasts (``client/workers.py``, ``shelly doctor``)."""

PREVIEW_CHARS = 80
"""How much of a run's task its ``preview`` kwarg carries (Flower's task list)."""

Enqueue = Callable[[str, list[Any], dict[str, Any]], Awaitable[bool | None]]
"""Sends a task by name with args and kwargs (``fast_send``'s direct push to a Redis broker, else
the Celery app's ``send_task`` off the loop);
``False`` when the broker refused it (the run is then due for the reapers' next scan)."""


def task_kwargs(agent: str, depth: int, session: str, task: str) -> dict[str, Any]:
    """What Flower shows of a run's task: agent, depth, session and a preview of the task."""
    return {"agent": agent, "depth": depth, "session": session, "preview": task[:PREVIEW_CHARS]}
