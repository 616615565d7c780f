"""A live conversation with one top-level agent: ``send`` a message, get the run's outcome.

A session has two names, as in Shelly: ``name`` (``session-N``, this engine's counter, for
display) and ``id`` (16 hex characters), the **persisted** id. The persisted id is the one that
scopes everything outside this process — the blackboard and task board, the event stream, the
folder under ``.shelly/local/sessions/`` — so ``shelly run --session <id>`` and ``shelly state
--session <id>`` find the same session. Only one ``send`` runs at a time (Shelly's rule: a second
concurrent send is an error, not a queue). A successful send is saved at once; a failed one is
not, so a session on disk only ever holds completed exchanges.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any, Protocol

from shelly_dist import events
from shelly_dist.agent import Agent
from shelly_dist.agent.effects.compact import summarize
from shelly_dist.chats import Message, Role, Text
from shelly_dist.chats.parts import Part
from shelly_dist.engine.decisions import Decisions
from shelly_dist.engine.eventbus import EventBus
from shelly_dist.engine.sessions import SessionInfo
from shelly_dist.engine.toolboxes import Toolboxes
from shelly_dist.errors import RunCancelled, SessionNotSaved, StoreError, UsageError
from shelly_dist.events import Event
from shelly_dist.runtime import RunOutcome, Runtime
from shelly_dist.runtime.base import check_run_id

log = logging.getLogger(__name__)


class SessionHost(Protocol):
    """What a :class:`Session` uses of the engine that built it (the ``Engine`` is one): named
    here, so the engine imports this module and not the other way round."""

    bus: EventBus
    runtime: Runtime
    sessions: Any
    """Where sessions are saved: a ``SessionStore`` (files) or ``RedisSessions`` (``engine.session_store``)."""
    toolboxes: Toolboxes
    decisions: Decisions


def user_messages(task: str, context: str = "", attachments: Sequence[Part] = ()) -> list[Message]:
    """A task's user messages: its ``context`` in a ``<context>`` block (when any), then the task
    with its ``attachments`` (what ``shelly batch`` sends for an item, ``shelly run`` and the
    console for a new session)."""
    messages = []
    if context:
        messages.append(Message.text("user", Role.USER, f"<context>\n{context}\n</context>"))
    messages.append(Message(sender="user", role=Role.USER, parts=[Text(text=task), *attachments]))
    return messages


CANCELED_SAVE_WAIT = 5.0
"""Seconds a canceled send waits for its conversation to be saved (a store that is away does not
hold up the exit: the session is then not listed)."""


class Session:
    """One conversation; build it with ``Engine.session`` or ``Engine.resume_session``."""

    def __init__(self, engine: SessionHost, *, name: str, agent: Agent, info: SessionInfo,
                 persist: bool = True) -> None:
        self.engine = engine
        self.name = name
        self.agent = agent
        self.info = info
        self.persist = persist
        """Auto-save after each successful send (batch items and tests may turn it off)."""
        self._active = False

    @property
    def id(self) -> str:
        """The persisted id (scopes the blackboard, task board, events and the saved folder)."""
        return self.info.id

    @property
    def active(self) -> bool:
        """True while a send is running."""
        return self._active

    def _publish(self, kind: str, **data: object) -> None:
        self.engine.bus.publish(Event(kind=kind, agent=self.agent.name, session_id=self.id, data=dict(data)))

    async def send(self, text: str) -> RunOutcome:
        """Append ``text`` as the user's message and run the agent to its final reply.

        Raises ``UsageError`` when another send of this session is running; any error of the run
        (model, agent, cancellation) propagates after an ``error`` event. A run that finished but
        whose session could not be saved raises ``SessionNotSaved`` carrying the outcome.
        """
        return await self.send_messages([Message.text("user", Role.USER, text)])

    async def send_messages(self, messages: list[Message], *, run_id: str | None = None) -> RunOutcome:
        """:meth:`send` with ready-made messages (images, documents, several parts); ``run_id``
        names the top-level run (default: a fresh id), so a caller can find it before it ends."""
        if run_id is not None:
            check_run_id(run_id, f"engine: session {self.id}")
        if self._active:
            raise UsageError(f"engine: session {self.id}: another send is already active")
        self._active = True
        started = time.monotonic()
        try:
            if self.persist:  # a conversation that could not be kept fails before the run, not after
                await self.engine.sessions.prepare(self.id)
            text = " ".join(m.text_content() for m in messages)
            self._publish(events.AGENT_START, depth=0, task=text[:500])
            try:
                outcome = await self.engine.runtime.execute(self.agent, messages, session=self.id, run_id=run_id)
            except BaseException as exc:
                self._publish(events.ERROR, error=str(exc) or type(exc).__name__, type=type(exc).__name__)
                if self.persist and isinstance(exc, asyncio.CancelledError | RunCancelled):
                    # canceled (Ctrl-C, `shelly cancel`): still listed, continued from what was said;
                    # a failed send is not saved (its error is the answer to fix, then ask again)
                    with contextlib.suppress(Exception):  # bounded: a Ctrl-C must not wait on a store
                        await asyncio.wait_for(asyncio.shield(self._save_answered()), CANCELED_SAVE_WAIT)
                raise
            self._publish(
                events.AGENT_END,
                usage=outcome.usage.model_dump(),
                elapsed=round(time.monotonic() - started, 3),
                run_id=outcome.run_id,
            )
            if self.persist:
                try:
                    await self.save()
                except StoreError as exc:  # the answer stands; the caller still gets it (exc.outcome)
                    raise SessionNotSaved(f"session {self.id}: not saved ({exc}); the answer is complete, "
                                          f"but --session {self.id} cannot continue from it",
                                          key=self.id, outcome=outcome) from exc
            return outcome
        finally:
            self._active = False

    async def compact(self) -> str:
        """Summarise the conversation and replace it with the summary (Shelly's ``Session.Compact``,
        the chat's ``/compact``), with the agent's own model; saved at once. Returns the summary."""
        if self._active:
            raise UsageError(f"engine: session {self.id}: cannot compact while a send is active")
        self._active = True
        try:
            summary = await summarize(self.agent.chat, self.agent.completer, self.agent.name)
            if self.persist:
                await self.save()
            return summary
        finally:
            self._active = False

    async def questions(self) -> list[dict[str, object]]:
        """This session's open ``ask_user`` questions (``id``, ``agent``, ``run``, ``text``,
        ``options``…), oldest first: on the pool from every run of the session, embedded from this
        engine's runs."""
        pool, here = self._answer_channel("questions")
        return await pool.questions(self.id) if pool is not None else here.questions(self.id)

    async def respond(self, question_id: str, answer: str) -> None:
        """Answer ``ask_user`` question ``question_id`` (Shelly's ``Session.Respond``): the asking
        run resumes with ``answer`` as the tool result — on the pool on any worker (or its waiting
        coordinator wakes), from any machine; embedded in this engine. A question that is not open
        is a ``UsageError``."""
        pool, here = self._answer_channel("respond")
        if pool is not None:
            await pool.respond(self.id, question_id, answer)
        else:
            here.respond(self.id, question_id, answer)

    async def decisions(self) -> list[dict[str, Any]]:
        """This session's open decisions — ``ask_user`` questions and approvals of gated tool
        calls — oldest first, in the shape of docs/reference.md ("Decisions")."""
        return await self.engine.decisions.list(session=self.id)

    async def approve(self, decision_id: str, *, arguments: str | None = None, always: bool = False,
                      by: str = "python") -> None:
        """Approve the gated tool call ``decision_id`` (``a-N``): it runs, with ``arguments`` (a JSON
        object) in place of the model's when given; ``always``: this tool's later calls in the
        session are approved at once. A decision that is not open is a ``UsageError``."""
        await self.engine.decisions.approve(self.id, decision_id, arguments=arguments, always=always, by=by)

    async def reject(self, decision_id: str, *, reason: str = "", always: bool = False, by: str = "python") -> None:
        """Reject the gated tool call ``decision_id``: the tool never runs and the model gets an
        error result saying it was rejected, with ``reason``."""
        await self.engine.decisions.reject(self.id, decision_id, reason=reason, always=always, by=by)

    async def steer(self, text: str, *, agent: str | None = None, run: str | None = None, interrupt: bool = False,
                    by: str = "python") -> str:
        """Say ``text`` to this session's top-level run (or the live run of ``agent``, or run
        ``run``) while it works: it joins the run's chat before its next model call, on whatever
        worker continues it. ``interrupt`` also skips the step's tool calls not started yet.
        Returns the run's id; no such live run is a ``UsageError``."""
        return await self.engine.decisions.steer(self.id, text, agent=agent, run=run, interrupt=interrupt, by=by)

    def _answer_channel(self, what: str) -> tuple[Any, Any]:
        """(the pool runtime, or ``None``; else this engine's waiting answerer)."""
        runtime = self.engine.runtime
        if hasattr(runtime, "respond"):  # the CeleryRuntime (no import of it here)
            return runtime, None
        answerer = self.engine.toolboxes.responder.answerer
        if not hasattr(answerer, "respond"):
            raise UsageError(f"engine: session {self.id}: {what}: this engine's questions are answered by its "
                             f"answerer ({type(answerer).__name__}), not Session.respond")
        return None, answerer

    async def _save_answered(self) -> None:
        """Save the conversation of a send that was canceled, up to its last
        point where every tool call has its result: ``shelly sessions`` lists it, and ``--session``
        continues from there (a provider refuses a tool call without its result)."""
        kept = answered_prefix(self.agent.chat.messages())
        self.info = await self.engine.sessions.save(self.info, kept)

    async def save(self) -> SessionInfo:
        """Write the conversation to the engine's session store (overwrites the record)."""
        self.info = await self.engine.sessions.save(self.info, self.agent.chat.messages())
        log.debug("session %s saved (%d messages)", self.id, self.info.msg_count)
        return self.info

    def restore(self, messages: list[Message]) -> None:
        """Put saved ``messages`` back into the agent's chat, after its (fresh) system prompt."""
        kept = messages[1:] if messages and messages[0].role == Role.SYSTEM else messages
        if kept:
            self.agent.chat.append(*kept)

    def __repr__(self) -> str:
        return f"Session(name={self.name!r}, id={self.id!r}, agent={self.agent.config_name!r})"


def answered_prefix(messages: list[Message]) -> list[Message]:
    """The longest prefix of ``messages`` in which every tool call has its result."""
    pending: set[str] = set()
    end = 0
    for i, m in enumerate(messages, start=1):
        pending |= {c.id for c in m.tool_calls()}
        pending -= {r.tool_call_id for r in m.tool_results()}
        if not pending:
            end = i
    return messages[:end]
