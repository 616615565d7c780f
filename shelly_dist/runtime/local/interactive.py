"""Interactive delegation in one process: each child an asyncio task, its questions on a queue.

:class:`LiveChildren` is Shelly's ``DelegationRegistry`` for one parent run: the waiting children
by delegation id, registered once, cancelled all at once by :meth:`LiveChildren.close` (twice is
harmless). :func:`next_event` is Shelly's ``waitForChildEvent``: the child's next question, or its
entry when it ended, or — past ``question_timeout`` — the child cancelled and the timeout error.
The in-process delegator (:class:`~.delegator.InlineDelegator`) drives them.

A child cancelled that way ends its run with :class:`~shelly_dist.agent.stops.DelegationClosed` rather than being
torn down, so the delegator settles it like any other end (its task on the board moves to
``failed``, as in Shelly): :meth:`LiveChild.closing_scope` is that conversion.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from shelly_dist.agent.interaction import ChildQuestion
from shelly_dist.agent.interactive import question_entry, timeout_text
from shelly_dist.agent.records import ChildRequest, DelegateEntry
from shelly_dist.agent.stops import DELEGATION_CLOSED, DelegationClosed
from shelly_dist.errors import AgentError
from shelly_dist.runtime.local.stops import stop


class LiveChild:
    """One interactive child running here: its questions go out, its answers come in."""

    def __init__(self, request: ChildRequest) -> None:
        self.request = request
        self.questions: asyncio.Queue[ChildQuestion] = asyncio.Queue(maxsize=1)
        self.answers: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
        self.task: asyncio.Task[DelegateEntry] | None = None
        self.run_id = ""
        """The run of the child (or of the handoff peer now on its entry), once started."""
        self.closing = False
        """Set by :meth:`cancel`: the cancellation that follows is the delegation closing."""

    async def ask(self, question: ChildQuestion) -> str:
        """The child's ``request_input``: hand the question to the parent, wait for its answer."""
        await self.questions.put(question)
        return await self.answers.get()

    def start(self, run: Callable[[], Awaitable[DelegateEntry]]) -> None:
        self.task = asyncio.ensure_future(run())

    @contextlib.asynccontextmanager
    async def closing_scope(self) -> AsyncIterator[None]:
        """Around the child's run, inside its task: the cancellation :meth:`cancel` sends leaves
        the block as :class:`~shelly_dist.agent.stops.DelegationClosed` (any other cancellation passes through)."""
        try:
            yield
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if self.closing and task is not None and task.uncancel() == 0:
                raise DelegationClosed() from exc
            raise

    async def cancel(self) -> None:
        """Cancel the child (its delegation closed) and wait until it has stopped."""
        if self.task is not None and not self.task.done():
            self.closing = True
            await stop([self.task], DELEGATION_CLOSED)


class LiveChildren:
    """The interactive children of one parent run, by delegation id."""

    def __init__(self) -> None:
        self._live: dict[str, LiveChild] = {}

    def register(self, delegation_id: str, child: LiveChild) -> None:
        if delegation_id in self._live:
            raise AgentError(f'delegation "{delegation_id}" already registered')
        self._live[delegation_id] = child

    def get(self, delegation_id: str) -> LiveChild | None:
        return self._live.get(delegation_id)

    def remove(self, delegation_id: str) -> None:
        self._live.pop(delegation_id, None)

    async def close(self) -> None:
        """Cancel every child still registered (a second call finds none)."""
        live, self._live = list(self._live.values()), {}
        await asyncio.gather(*(c.cancel() for c in live))


async def next_event(children: LiveChildren, child: LiveChild, limit: float) -> DelegateEntry:
    """Wait for the child to ask or to end, at most ``limit`` seconds (``question_timeout``; 0: no
    limit)."""
    request, did = child.request, child.request.delegation_id
    assert child.task is not None
    asked = asyncio.ensure_future(child.questions.get())
    try:
        done, _ = await asyncio.wait({asked, child.task}, timeout=limit or None,
                                     return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not asked.done():
            asked.cancel()
    if asked in done:
        return question_entry(request, asked.result())
    if child.task in done:
        children.remove(did)
        if child.task.cancelled():
            return DelegateEntry(agent=request.agent, error="context canceled")
        return child.task.result()
    children.remove(did)
    await child.cancel()
    return DelegateEntry(agent=request.agent, error=timeout_text(limit, did))
