"""``ask_user`` answered in this process: the question waits for ``Session.respond``.

Shelly's ``ask_user`` blocks until ``Session.Respond`` (or the context is cancelled). On the pool a
question waits in Redis for ``Session.respond`` / ``shelly answer``; embedded, the same question
waits here, in the engine that runs it, for ``Session.respond`` on that engine. So a program that
opens an engine without an answerer answers its agents' questions the same way on both runtimes,
and ``options.question_timeout`` bounds the wait the same way (the :class:`Responder` enforces it
embedded, with the pool's error text).

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
from shelly_dist.tools.builtin.ask import Question

__all__ = ["WaitingAnswerer"]


@dataclass
class _Open:
    session: str
    listing: dict[str, object]
    answer: asyncio.Future[str] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class WaitingAnswerer:
    """Holds each question open until :meth:`respond` answers it (or its asker stops waiting)."""

    def __init__(self) -> None:
        self._open: dict[str, _Open] = {}

    async def answer(self, question: Question) -> str:
        listing = question.event_data() | {
            "options": question.options, "agent": identity.agent_name(), "run": identity.run_id(),
            "asked": time.time(), "timeout": question.timeout}
        waiting = _Open(identity.session_id(), listing)
        self._open[question.id] = waiting
        try:
            return await waiting.answer
        finally:
            self._open.pop(question.id, None)

    def questions(self, session: str) -> list[dict[str, object]]:
        """The session's open questions, oldest first, as the pool lists them (``id``, ``text``,
        ``options``, ``agent``, ``run``, ``asked``, ``timeout``…)."""
        return [dict(q.listing) for q in self._open.values() if q.session == session]

    def respond(self, session: str, question_id: str, text: str) -> None:
        """Answer ``question_id`` of ``session``; a question that is not open is a ``UsageError``
        (the pool's text)."""
        waiting = self._open.get(question_id)
        if waiting is None or waiting.session != session or waiting.answer.done():
            raise UsageError(f"answer: no open question {question_id} in session {session} (see `shelly questions "
                             f"--session {session}`)")
        waiting.answer.set_result(text)
