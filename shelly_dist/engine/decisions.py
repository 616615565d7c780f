"""People in the loop, one API on both runtimes: every pending decision, answered from here.

A decision is an ``ask_user`` question or a gated tool call's approval waiting for a person. On a
worker pool they wait in Redis, indexed pool-wide (any process that reaches the config's Redis
lists and answers them, whatever session or batch asked); embedded they wait in this engine (the
runs of this process). :class:`Decisions` hides which: ``list`` with filters, ``answer``,
``approve``/``reject`` one by ``(session, id)`` or every match at once, and ``steer`` a live run.
A web server (``shelly serve``), the terminal chat, the CLI and ``Session`` all call these, so a
decision's JSON (docs/reference.md, "Decisions") and its errors are the same everywhere:

``{id, kind, session, run, path, agent, asked, timeout, times_out, batch?}`` plus ``text``,
``options``… for a question, ``tool`` and ``arguments`` for an approval.

``always``: the verdict sticks for that tool in the decision's batch (a ``shelly batch`` item's
session), else its session — later calls of the tool there are decided at once — and the other
approvals of that tool already waiting there are decided the same way now.
"""

from __future__ import annotations

import asyncio
import getpass
import socket
from typing import Any, Protocol

from shelly_dist.agent.steering import SteerMessage
from shelly_dist.engine.toolboxes import Toolboxes
from shelly_dist.errors import UsageError
from shelly_dist.runtime import Runtime
from shelly_dist.runtime.local.steering import LiveRun, MemoryInbox, pick
from shelly_dist.tools.builtin.answers import WaitingAnswerer
from shelly_dist.tools.decisions import APPROVAL, Verdict, check_arguments, skipped

__all__ = ["Decisions", "DecisionsHost", "who"]

BULK_AT_ONCE = 32
"""Decisions answered concurrently by one bulk call (each is a few Redis round trips)."""


def who(channel: str) -> str:
    """A label of who decides from ``channel`` (``cli:alice@host``): never a secret."""
    try:
        user = getpass.getuser()
    except Exception:  # no user name in this environment (a container without one)
        user = "unknown"
    return f"{channel}:{user}@{socket.gethostname()}"


class DecisionsHost(Protocol):
    """What :class:`Decisions` reads of the engine that owns it (the ``Engine`` is one): named
    here, so the engine imports this module and not the other way round."""

    runtime: Runtime
    toolboxes: Toolboxes
    inbox: MemoryInbox


class Decisions:
    """The decisions of one engine's runtime (``Engine.decisions``); ``Session`` has the same
    calls for its own session."""

    def __init__(self, engine: DecisionsHost | None = None, *, pool: Any = None) -> None:
        """Over ``engine``'s runtime, or straight over a pool runtime (``pool``: what the CLI opens,
        without building an engine)."""
        self.engine = engine
        self.pool = pool

    @property
    def _pool(self) -> Any:
        if self.pool is not None:
            return self.pool
        runtime = self.engine.runtime if self.engine is not None else None
        return runtime if hasattr(runtime, "decisions") else None  # the CeleryRuntime (no import of it here)

    def _here(self, what: str) -> WaitingAnswerer:
        if self.engine is None:
            raise UsageError(f"{what}: no worker pool configured (distributed.broker_url): embedded runs are "
                             "decided in the process that runs them")
        answerer = self.engine.toolboxes.responder.answerer
        if not isinstance(answerer, WaitingAnswerer):
            raise UsageError(f"{what}: this engine's decisions are answered by its answerer "
                             f"({type(answerer).__name__}), not through Engine.decisions")
        return answerer

    async def list(self, *, session: str | None = None, agent: str | None = None, kind: str | None = None,
                   tool: str | None = None, batch: str | None = None) -> list[dict[str, Any]]:
        """Every open decision, oldest first, of ``session`` (any when ``None``), asked by ``agent``
        (its instance or config name, or any agent on its path), of ``kind`` (``question``,
        ``approval``), for ``tool``, of ``batch`` (its identity)."""
        pool = self._pool
        if pool is not None:
            found = await pool.decisions(session)
        elif self.engine is None:
            found = self._here("decisions").decisions(session)  # raises: nothing to list from here
        else:
            answerer = self.engine.toolboxes.responder.answerer  # a terminal's decisions are its own
            found = answerer.decisions(session) if isinstance(answerer, WaitingAnswerer) else []
        return [d for d in found if _matches(d, agent=agent, kind=kind, tool=tool, batch=batch)]

    async def answer(self, session: str, decision_id: str, text: str, *, by: str = "", what: str = "answer") -> None:
        """Answer decision ``decision_id`` of ``session``: a question with ``text``, an approval with
        a verdict's text or a person's ``yes``/``no [reason]``. The asking run goes on (on the pool,
        on any worker). A decision that is not open is a ``UsageError``."""
        pool = self._pool
        if pool is not None:
            await pool.respond(session, decision_id, text, by=by, what=what)
        else:
            self._here(what).respond(session, decision_id, text)

    async def approve(self, session: str, decision_id: str, *, arguments: str | None = None, always: bool = False,
                      by: str = "python") -> None:
        """Approve gated call ``decision_id`` of ``session`` (with ``arguments``, a JSON object, in
        place of the model's); ``always``: the tool's later calls there are approved at once."""
        await self.decide(session, decision_id, Verdict.approve(arguments=_arguments(arguments), by=by, always=always))

    async def reject(self, session: str, decision_id: str, *, reason: str = "", always: bool = False,
                     by: str = "python") -> None:
        """Reject gated call ``decision_id`` of ``session``: the model gets an error result saying it
        was rejected and ``reason``; the tool never runs."""
        await self.decide(session, decision_id, Verdict.reject(reason, by=by, always=always))

    async def decide(self, session: str, decision_id: str, verdict: Verdict) -> None:
        """Give ``verdict`` to approval ``decision_id`` of ``session`` (:meth:`approve` and
        :meth:`reject` build it); a question, or a decision not open, is a ``UsageError``."""
        what = "approve" if verdict.decision == "approve" else "reject"
        found = [d for d in await self.list(session=session) if d["id"] == decision_id]
        if found and found[0]["kind"] != APPROVAL:
            raise UsageError(f"{what}: {decision_id} of session {session} is a question: answer it with "
                             f"`shelly answer --session {session} {decision_id} TEXT`")
        await self.answer(session, decision_id, verdict.to_text(), by=verdict.by, what=what)
        if verdict.always and found:  # the tool's other approvals waiting in the same scope, now
            decision = found[0]
            scope = {"batch": decision["batch"]} if decision.get("batch") else {"session": session}
            await self.decide_all(verdict.model_copy(update={"always": False}), tool=str(decision["tool"]), **scope)

    async def decide_all(self, verdict: Verdict, *, tool: str | None = None, session: str | None = None,
                         batch: str | None = None, agent: str | None = None) -> int:
        """Give ``verdict`` to every open approval matching the filters (all sessions and batches
        when none); how many it decided (one answered meanwhile by someone else is not counted)."""
        pending = await self.list(session=session, kind=APPROVAL, tool=tool, batch=batch, agent=agent)
        gate = asyncio.Semaphore(BULK_AT_ONCE)

        async def one(d: dict[str, Any]) -> bool:
            async with gate:
                return await self._try(str(d["session"]), str(d["id"]), verdict.to_text(), verdict.by)

        return sum(await asyncio.gather(*(one(d) for d in pending)))

    async def try_answer(self, session: str, decision_id: str, text: str, *, by: str = "") -> bool:
        """:meth:`answer`, but a decision answered meanwhile (or whose run ended) is ``False``, not
        an error: what a prompt that lost a race to another person wants."""
        return await self._try(session, decision_id, text, by)

    async def _try(self, session: str, decision_id: str, text: str, by: str) -> bool:
        pool = self._pool
        if pool is not None:
            return bool(await pool.try_respond(session, decision_id, text, by=by))
        try:
            self._here("decide").respond(session, decision_id, text)
        except UsageError:
            return False
        return True

    async def live_runs(self, session: str) -> list[LiveRun]:
        """The runs of ``session`` that have not ended, roots first (what ``steer`` addresses)."""
        pool = self._pool
        if pool is not None:
            return list(await pool.live_runs(session))
        self._here("steer")
        assert self.engine is not None
        return self.engine.inbox.live(session)

    async def steer(self, session: str, text: str, *, agent: str | None = None, run: str | None = None,
                    interrupt: bool = False, by: str = "python") -> str:
        """Say ``text`` to a live run of ``session`` — ``run`` by id, else the one run of ``agent``,
        else the session's top-level run: it joins the run's chat as a user message before its next
        model call, wherever the run continues. ``interrupt``: the step's tool calls not started
        yet are skipped, and the approvals the run waits for end as skipped. Returns the run's id."""
        if not text.strip():
            raise UsageError("steer: the message is empty")
        target = pick(await self.live_runs(session), session=session, agent=agent, run=run)
        message = SteerMessage(text=text, interrupt=interrupt, by=by)
        pool = self._pool
        if pool is not None:
            await pool.steer(session, target.id, message)
        else:
            assert self.engine is not None
            self.engine.inbox.post(target.id, message)
        if interrupt:  # after the message: the run it lets go takes it in its next model call
            for d in await self.list(session=session, kind=APPROVAL):
                if d["run"] == target.id:
                    await self._try(session, str(d["id"]), skipped(by).to_text(), by)
        return target.id


def _arguments(text: str | None) -> str | None:
    if text is None:
        return None
    try:
        return check_arguments(text)
    except ValueError as exc:
        raise UsageError(f"approve: {exc}") from None


def _matches(d: dict[str, Any], *, agent: str | None, kind: str | None, tool: str | None, batch: str | None) -> bool:
    if kind is not None and d.get("kind") != kind:
        return False
    if tool is not None and d.get("tool") != tool:
        return False
    if batch is not None and d.get("batch") != batch:
        return False
    if agent is not None:
        names = {str(d.get("agent", "")), *(str(p) for p in d.get("path") or [])}
        return agent in names or any(n.startswith(f"{agent}-") for n in names)
    return True
