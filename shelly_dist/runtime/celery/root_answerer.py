"""``ask_user`` of a coordinator's top-level run (``shelly run`` on the pool, no terminal).

The coordinator process drives its top-level run itself and holds no worker, so it need not
suspend the run: it registers the question in Redis exactly as a worker's run does
(:func:`.questions.ask`), announces it on the session stream and the live view, and waits on the
run's channel for the answer — ``shelly answer`` or ``Session.respond`` from any machine, or the
reapers' timeout. It keeps the question's deadline itself too, so it ends the wait on time even
with no worker up, and closes the question when it stops waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from shelly_dist import events
from shelly_dist.chats import ToolResult
from shelly_dist.errors import ToolError
from shelly_dist.events import Event
from shelly_dist.identity import agent_name, run_id
from shelly_dist.runtime.celery.lease import Lease
from shelly_dist.runtime.celery.questions import answer, answer_field, ask, result_of
from shelly_dist.state.connection import redis_errors
from shelly_dist.state.subscription import Subscription
from shelly_dist.tools.builtin.ask import ASK_USER, Question, timeout_error


class RootAnswerer:
    """The answerer of a coordinator's top-level run (``shelly run`` with no terminal, on the
    pool): the question is registered in Redis like a worker's, announced on the session stream
    and in this process, and answered from anywhere; this process waits on the run's channel (it
    holds no worker). Other runs in this process have no answer channel (a ``ToolError``)."""

    announces = True

    def __init__(self, poll_interval: float) -> None:
        self.poll_interval = poll_interval
        self._roots: dict[str, tuple[Lease, Callable[[Event], None], Callable[[], Awaitable[None]]]] = {}
        self._calls = 0

    def attach(self, lease: Lease, sink: Callable[[Event], None], flush: Callable[[], Awaitable[None]]) -> None:
        """While the coordinator drives run ``lease.run_id``, its questions come here; ``sink``
        and ``flush`` put the ``ask_user`` event on the live view and the session stream."""
        self._roots[lease.run_id] = (lease, sink, flush)

    def detach(self, run_id: str) -> None:
        self._roots.pop(run_id, None)

    async def answer(self, question: Question) -> str:
        rid = run_id()
        found = self._roots.get(rid or "")
        if found is None:
            raise ToolError(f"{ASK_USER}: this run has no answer channel", tool=ASK_USER)
        lease, sink, flush = found
        store = lease.store
        self._calls += 1
        field = answer_field(0, f"root-{self._calls}-{question.id}")
        payload = question.model_dump(by_alias=True) | {"timeout": question.timeout}
        qid, _ = await ask(lease, agent_name() or lease.record.agent, rid or "", field, payload)
        sink(Event(kind=events.ASK_USER, agent=agent_name() or lease.record.agent, run_id=rid,
                   session_id=lease.record.session, data=question.model_copy(update={"id": qid}).event_data()))
        await flush()
        try:
            async with asyncio.timeout(question.timeout or None):
                result = await self._wait(lease, field)
        except TimeoutError:
            await self._close(lease, qid, question.timeout)
            raw = None
            with contextlib.suppress(Exception):  # an answer that won the race is kept
                raw = await store.client.hget(store.keys.run_children(lease.run_id), field)
            result = result_of(raw) if raw else ToolResult(
                tool_call_id="", content=timeout_error(qid, question.timeout), is_error=True)
        except asyncio.CancelledError:
            await self._close(lease, qid, question.timeout)
            raise
        if result.is_error:
            raise ToolError(result.content, tool=ASK_USER)
        return result.content

    async def _wait(self, lease: Lease, field: str) -> ToolResult:
        store = lease.store
        async with Subscription(store.client, store.keys.run_changed(lease.run_id),
                                poll_interval=self.poll_interval) as sub:
            while True:
                with redis_errors("questions"):
                    raw = await store.client.hget(store.keys.run_children(lease.run_id), field)
                if raw is not None:
                    return result_of(raw)
                await sub.wait(self.poll_interval)

    @staticmethod
    async def _close(lease: Lease, qid: str, limit: float) -> None:
        """Answer the question with the timeout error (the first answer wins: an answer that
        arrived just before stays), so nobody answers a run that moved on."""
        store, settings = lease.store, lease.store.settings
        with contextlib.suppress(Exception):
            await asyncio.shield(answer(store.client, store.keys, lease.record.session, qid,
                                        timeout_error(qid, limit), retention=settings.retention,
                                        requeue_after=settings.requeue_after, is_error=True))
