"""``ask_user`` and approvals answered in this process: each waits for ``Session.respond`` (or
``Session.approve``/``reject``).

Shelly's ``ask_user`` blocks until ``Session.Respond`` (or the context is cancelled). On the pool a
question waits in Redis for ``Session.respond`` / ``shelly answer``; embedded, the same question
waits here, in the engine that runs it, for ``Session.respond`` on that engine. So a program that
opens an engine without an answerer answers its agents' questions the same way on both runtimes,
and ``options.question_timeout`` bounds the wait the same way (the :class:`Responder` enforces it
embedded, with the pool's error text). A gated tool call's approval waits here the same way, and
is listed beside the questions (``kind``: ``question`` or ``approval``) in the shape the pool's
decision index lists it (docs/reference.md, "Decisions").

A process where nobody can call ``Session.respond`` (``shelly run`` without a terminal, ``shelly
batch``…) uses :class:`~shelly_dist.tools.builtin.ask.NoAnswerer` instead, so a question nobody
will see is an error result, never a hang.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from shelly_dist import identity
from shelly_dist.errors import UsageError
from shelly_dist.tools.builtin.ask import Request, kind_of
from shelly_dist.tools.decisions import Approval, Verdict, skipped

__all__ = ["WaitingAnswerer"]


@dataclass
class _Open:
    session: str
    listing: dict[str, object]
    answer: asyncio.Future[str] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


def listing_of(request: Request, *, session: str = "", path: list[str] | None = None) -> dict[str, object]:
    """One open decision as ``shelly decisions`` lists it (the identity of the asking run from the
    context): ``id``, ``kind``, ``session``, ``run``, ``path``, ``agent``, ``asked``, ``timeout``,
    ``times_out``; a question's ``text`` and ``options``…; an approval's ``tool`` and ``arguments``."""
    asked = time.time()
    agent = identity.agent_name()
    listing: dict[str, object] = {"id": request.id, "kind": kind_of(request), "session": session,
                                  "run": identity.run_id(), "agent": agent, "asked": asked,
                                  "timeout": request.timeout,
                                  "times_out": asked + request.timeout if request.timeout else None}
    if isinstance(request, Approval):
        listing |= {"path": request.path or [agent], "tool": request.tool, "arguments": request.parsed_arguments()}
    else:
        listing |= request.event_data() | {"options": request.options, "path": path or [agent]}
    return listing


class WaitingAnswerer:
    """Holds each question and approval open until :meth:`respond` answers it (or its asker stops
    waiting)."""

    def __init__(self) -> None:
        self._open: dict[str, _Open] = {}

    async def answer(self, question: Request) -> str:
        session = identity.session_id()
        waiting = _Open(session, listing_of(question, session=session))
        self._open[question.id] = waiting
        try:
            return await waiting.answer
        finally:
            self._open.pop(question.id, None)

    def questions(self, session: str) -> list[dict[str, object]]:
        """The session's open questions, oldest first, as the pool lists them (``id``, ``text``,
        ``options``, ``agent``, ``run``, ``asked``, ``timeout``…)."""
        keep = ("id", "text", "options", "header", "multiSelect", "maxSelections", "agent", "run", "asked",
                "timeout")
        return [{k: v for k, v in q.listing.items() if k in keep}
                for q in self._open.values() if q.session == session and q.listing["kind"] == "question"]

    def decisions(self, session: str | None = None) -> list[dict[str, object]]:
        """Every open decision (of ``session`` when given), oldest first."""
        found = [dict(q.listing) for q in self._open.values() if session is None or q.session == session]
        return sorted(found, key=lambda q: (float(q["asked"]), str(q["id"])))  # type: ignore[arg-type]

    def respond(self, session: str, question_id: str, text: str) -> None:
        """Answer ``question_id`` of ``session`` (an approval with a verdict's text); one that is
        not open is a ``UsageError`` (the pool's text)."""
        waiting = self._open.get(question_id)
        if waiting is None or waiting.session != session or waiting.answer.done():
            noun = "question" if question_id.startswith("q-") else "decision"
            raise UsageError(f"answer: no open {noun} {question_id} in session {session} (see `shelly decisions "
                             f"--session {session}`)")
        if waiting.listing["kind"] == "approval":
            try:
                Verdict.parse(text)
            except ValueError as exc:
                raise UsageError(f"answer: {question_id} is an approval: {exc}") from None
        waiting.answer.set_result(text)

    def interrupt(self, run: str, by: str = "") -> int:
        """End every open approval of run ``run`` as skipped (``steer --interrupt``); how many."""
        hit = [q for q in self._open.values()
               if q.listing.get("run") == run and q.listing["kind"] == "approval" and not q.answer.done()]
        for q in hit:
            q.answer.set_result(skipped(by).to_text())
        return len(hit)
