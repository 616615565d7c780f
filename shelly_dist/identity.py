"""Who is running: the agent, run and session of the current task, carried by contextvars.

Tools attribute their work through these (``created_by`` of a task, the assignee of a claim, the
author of a blackboard write) without being handed the agent: the loop sets them around every
model and tool call. Like Shelly's ``agentctx``, this module depends on nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Any

_agent: ContextVar[str] = ContextVar("shelly_agent", default="")
_run: ContextVar[str] = ContextVar("shelly_run", default="")
_session: ContextVar[str] = ContextVar("shelly_session", default="")
_priority: ContextVar[str] = ContextVar("shelly_priority", default="interactive")
_share: ContextVar[str] = ContextVar("shelly_share", default="")
_path: ContextVar[tuple[str, ...]] = ContextVar("shelly_path", default=())


def agent_name() -> str:
    """The instance name of the agent running in this context ("" outside any agent)."""
    return _agent.get()


def run_id() -> str:
    """The id of the run in this context ("" when none)."""
    return _run.get()


def session_id() -> str:
    """The session of this context ("" when none)."""
    return _session.get()


def priority() -> str:
    """The priority of the run tree in this context at its provider: ``interactive`` (a person
    waits: ``shelly run``, ``Session``, A2A, MCP; the default) or ``batch`` (``shelly batch``)."""
    return _priority.get()


def share() -> str:
    """Who the run tree in this context shares its providers' keys fairly with, within its
    priority: a batch's identity, else its root run ("" when not set: the root's own id)."""
    return _share.get()


def run_path() -> list[str]:
    """The instance names from the root's agent down to the agent of this context (``["lead",
    "deployer-1"]``): how a person finds the run a decision comes from. ``[agent]`` when unknown."""
    return list(_path.get()) or ([_agent.get()] if _agent.get() else [])


@contextmanager
def acting_as(agent: str | None = None, *, run: str | None = None, session: str | None = None,
              path: list[str] | None = None, priority: str | None = None, share: str | None = None
              ) -> Iterator[None]:
    """Set the identity for the body of the ``with``; arguments left ``None`` are inherited."""
    tokens: list[tuple[ContextVar[Any], Token[Any]]] = []
    for var, value in ((_agent, agent), (_run, run), (_session, session), (_path, tuple(path or ()) or None),
                       (_priority, priority), (_share, share)):
        if value is not None:
            tokens.append((var, var.set(value)))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def sanitize_filename(name: str) -> str:
    """Every character outside ``[A-Za-z0-9_-]`` becomes ``-`` (Shelly's ``SanitizeFilename``)."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "_-") else "-" for c in name)
