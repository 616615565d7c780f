"""Steering a busy run: a person's message joins its chat before its next model call.

Shelly's inbox (``SendToAgent``): "a message put in the agent's inbox appears in the chat after the
tool results and before the next LLM call". Here the inbox is durable: ``shelly steer`` (or
``Session.steer``) appends a :class:`SteerMessage` to the run's inbox — a list in Redis on the
pool, in memory embedded — and the run drains what lies past its cursor (``RunState.steered``)
before each model call, appending each as a user message. The cursor and the appended messages
are journaled together by the run's next checkpoint, the way spawned children's announcements are
(:func:`~shelly_dist.agent.spawn.drain`): a run continued on another worker, after a suspension
or a crash, neither loses a message nor takes one twice.

``interrupt``: a message that says so also stops the step it reaches — every tool call of the
reply that has not started gets the result ``skipped: the user interrupted`` (:func:`interrupt`),
and the approvals it waits for end the same way (the runtime answers them as skipped).
"""

from __future__ import annotations

import time
from typing import Protocol

from pydantic import BaseModel, Field

from shelly_dist import events
from shelly_dist.agent.records import RunState
from shelly_dist.chats import Chat, Message, Role, ToolCall, ToolResult
from shelly_dist.observability import metrics
from shelly_dist.tools.decisions import INTERRUPTED


class _Speaker(Protocol):
    chat: Chat


class Run(Protocol):
    """What steering needs of a run (:class:`~shelly_dist.agent.run.Run`): its state, its agent's
    chat, its events."""

    state: RunState
    agent: _Speaker

    def emit(self, kind: str, **data: object) -> None: ...

__all__ = ["Inbox", "SteerMessage", "drain", "interrupt", "waiting_at_end"]

STEER = "steer"
"""The intervention kind of a steering message (metrics)."""


class SteerMessage(BaseModel):
    """One steering message as its inbox keeps it (JSON on the pool)."""

    text: str
    interrupt: bool = False
    by: str = ""
    """A label of who sent it (``cli:alice@host``); never a secret."""
    at: float = Field(default_factory=time.time)


class Inbox(Protocol):
    """Where a run's steering messages wait: each backend implements reading past a cursor."""

    async def unread(self, run: Run, *, fresh: bool = False) -> list[SteerMessage]:
        """The messages of ``run`` after ``run.state.steered`` (oldest first), not taken yet;
        ``fresh``: read past any count the backend keeps from its last read."""
        ...


async def drain(run: Run, inbox: Inbox) -> int:
    """Append the run's unread steering messages to its chat as user messages and move its
    cursor; both are journaled by the run's next checkpoint, together."""
    fresh = await inbox.unread(run)
    for message in fresh:
        run.agent.chat.append(Message.text("user", Role.USER, message.text))
        run.emit(events.STEERED, text=message.text[:2_000], by=message.by, interrupt=message.interrupt)
        metrics.decided(STEER, 0.0, by=message.by)
    run.state.steered += len(fresh)
    return len(fresh)


async def waiting_at_end(run: Run, inbox: Inbox) -> bool:
    """Whether a message arrived that the run, about to finish, has not taken: it must then take
    another step (reopened) rather than drop it."""
    return bool(await inbox.unread(run, fresh=True))


async def interrupt(run: Run, inbox: Inbox, calls: list[ToolCall]) -> list[ToolCall]:
    """When an unread message says ``interrupt``, every call of ``calls`` (the step's calls not
    started yet) gets the result ``skipped: the user interrupted``; returns the calls left to run."""
    if not calls or not any(m.interrupt for m in await inbox.unread(run)):
        return calls
    for call in calls:
        run.state.tool_results[call.id] = ToolResult(tool_call_id=call.id, content=INTERRUPTED, is_error=True)
        run.emit(events.TOOL_CALL_END, tool=call.name, call_id=call.id, is_error=True)
    return []
