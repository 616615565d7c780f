"""A top-level run's start and end, reported as every other run's: ``run_started`` and
``run_finished`` (docs/events.md), for both runtimes' in-process roots.

A delegated child (:mod:`shelly_dist.agent.children`) and a root run on a worker (a batch item)
already report both; the root of a ``send`` — embedded, or driven by a coordinator on the pool —
reported only the session's ``agent_start``/``agent_end``, which reach the engine's bus and not the
session's stream, so ``shelly events --follow`` and the console could not tell when a coordinator's
run began or ended (issue 38). Each runtime's ``execute`` calls :func:`root_started` once the run's
sink is in place and :func:`root_finished` on every exit, so both report the same.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from shelly_dist.agent.children import Ending, finished, report, started
from shelly_dist.agent.delegation import entry_from_outcome
from shelly_dist.chats import Role
from shelly_dist.errors import RunCancelled

if TYPE_CHECKING:
    from shelly_dist.agent.run import Run
    from shelly_dist.chats import Message

__all__ = ["root_finished", "root_started", "task_of"]


def task_of(messages: list[Message]) -> str:
    """The task a top-level run reports: its last user message's text."""
    return next((m.text_content() for m in reversed(messages) if m.role == Role.USER), "")


def root_started(run: Run, task: str, *, worker: str = "") -> None:
    """``run_started`` of a top-level run: no parent, depth 0."""
    started(run, parent="", task=task, worker=worker)


def root_finished(run: Run, *, reply: Message | None = None, error: BaseException | None = None,
                  worker: str = "") -> None:
    """``run_finished`` of a top-level run that answered ``reply`` or raised ``error``: ``canceled``
    when it was cancelled (Ctrl-C, ``shelly cancel``), ``failed`` on any other error."""
    entry = entry_from_outcome(run.agent.config_name, reply=reply, completion=run.state.completion,
                               error=error if isinstance(error, Exception) else None,
                               instance=run.agent.name, max_iterations=run.agent.options.max_iterations)
    if isinstance(error, asyncio.CancelledError | RunCancelled):
        ending, entry.error = Ending.CANCELED, str(error) or "canceled"
    elif error is not None:
        ending = Ending.FAILED
    else:
        ending = Ending.DONE
    report(run, finished(run.agent.name, run.state.run_id, ending=ending, entry=entry.to_json(),
                         usage=run.state.usage.model_dump()))
