"""``ask_user`` and approvals of a coordinator's top-level run (``shelly run`` on the pool, no terminal).

The coordinator process drives its top-level run itself and holds no worker, so it need not
suspend the run: it registers the question (or a gated call's approval) in Redis exactly as a
worker's run does
(:func:`.questions.ask`), announces it on the session stream and the live view, and waits on the
run's channel for the answer — ``shelly answer`` or ``Session.respond`` from any machine, or the
reapers' timeout. It ends the wait on time even with no worker up: when the question's deadline
(the tree's index, the one the reapers scan) passes, it applies the reapers' own enforcer,
:func:`.questions.time_out`, and reads the result like any answer; it times the question out too
when it stops waiting (cancelled), so nobody answers a run that moved on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from shelly_dist import events
from shelly_dist.chats import ToolResult
from shelly_dist.errors import ToolError
from shelly_dist.events import Event
from shelly_dist.identity import agent_name, run_id, run_path
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.subscription import Subscription
from shelly_dist.runtime.celery.children.questions import answer_field, ask, deadline_of, result_of, time_out
from shelly_dist.runtime.celery.journal import Lease
from shelly_dist.tools.builtin.ask import ASK_USER, Request
from shelly_dist.tools.decisions import APPROVAL, QUESTION, Approval

logger = logging.getLogger(__name__)


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

    async def answer(self, question: Request) -> str:
        rid = run_id()
        found = self._roots.get(rid or "")
        if found is None:
            raise ToolError(f"{ASK_USER}: this run has no answer channel", tool=ASK_USER)
        lease, sink, flush = found
        self._calls += 1
        approval = isinstance(question, Approval)
        field = answer_field(0, f"root-{self._calls}-{question.id}")
        payload = question.model_dump(by_alias=True) | {"timeout": question.timeout}
        agent = agent_name() or lease.record.agent
        done = await ask(lease, agent, rid or "", field, payload, kind=APPROVAL if approval else QUESTION,
                         path=run_path())
        if done.sticky is not None:
            return done.sticky.to_text()
        shown = question.model_copy(update={"id": done.id})
        sink(Event(kind=events.APPROVAL_REQUESTED if approval else events.ASK_USER, agent=agent, run_id=rid,
                   session_id=lease.record.session, data=shown.event_data()))
        await flush()
        try:
            result = await self._wait(lease, done.id, field)
        except asyncio.CancelledError:
            await self._close(lease, done.id)
            raise
        if result.is_error:
            raise ToolError(result.content, tool=ASK_USER)
        return result.content

    async def _wait(self, lease: Lease, qid: str, field: str) -> ToolResult:
        """The answer joined under ``field``: an answer from anywhere, or the timeout error once
        the question's deadline (read from the tree's index, as the reapers read it) has passed —
        written by :func:`.questions.time_out`, the reapers' enforcer, so this process ends its
        wait on time with no worker up and never composes the timeout result itself."""
        store = lease.store
        root = lease.record.root
        deadline = await deadline_of(store.client, store.keys, root, qid)
        async with Subscription(store.client, store.keys.run_changed(lease.run_id),
                                poll_interval=self.poll_interval, tree=True) as sub:
            while True:
                with redis_errors("questions"):
                    raw = await store.client.hget(store.keys.run_children(lease.run_id), field)
                if raw is not None:
                    return result_of(raw)
                left = self.poll_interval if deadline is None else deadline - time.time()
                if left <= 0:
                    if await self._close(lease, qid):  # the next read finds the timeout (or the answer that won)
                        deadline = None
                        continue
                    left = self.poll_interval
                await sub.wait(min(left, self.poll_interval))

    async def _close(self, lease: Lease, qid: str) -> bool:
        """Time the question out (the first answer wins: an answer that arrived just before
        stays), so nobody answers a run that moved on; False (logged) when Redis could not be
        reached: the wait tries again after a poll interval."""
        store, settings = lease.store, lease.store.settings
        try:
            await asyncio.shield(time_out(store.client, store.keys, lease.record.root, qid,
                                          retention=settings.retention, requeue_after=settings.requeue_after))
        except Exception as exc:
            logger.warning("ask_user %s: could not time the question out (%s); trying again", qid, exc)
            return False
        return True
