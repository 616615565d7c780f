"""The right to advance one run: a typed lease whose methods are the only writers of the run.

DESIGN §3 rule 3: the journal, not the broker, decides who advances a run. A claim returns a
:class:`Lease` (the parsed record, the holder's token, the deadline); checkpoint, expect, release
and finish are its methods, and each is fenced inside its Lua script by the token, so fencing
cannot be forgotten. While a step is in flight :meth:`Lease.heartbeat` has the process's renewer
(:mod:`.renewer`, a thread of its own, so a busy or blocked event loop cannot delay it) renew the
lease every quarter of its length; a renewal that is refused (someone else holds the run now) or
that cannot reach Redis before the lease lapses marks the lease lost and cancels the step, which
then writes nothing (every write would be refused anyway) and is abandoned.

A coordinator's root run has no lease key: the coordinator process is its only writer, and its
token is stored as the record's ``owner`` (see :meth:`Journal.open_root`); it is never heartbeaten
and never reaped.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shelly_dist.agent import ChildRequest, RunState
from shelly_dist.chats import Message
from shelly_dist.errors import RunError
from shelly_dist.runtime.celery.record import RunRecord

if TYPE_CHECKING:
    from shelly_dist.runtime.celery.journal import Journal


class LeaseLost(RunError):
    """This process no longer holds the run: its writes were refused (``lease lost: <key>``)."""


@dataclass
class Held:
    """A checkpoint serialized but not written yet: the run's last one, held back by
    :meth:`Lease.hold` so it rides with the finish (one round trip for the run's end, not two)."""

    offset: int
    state: str
    """The :class:`RunState` JSON without its messages."""
    messages: list[str]

    @classmethod
    def of(cls, offset: int, state: RunState, new: list[Message]) -> Held:
        return cls(offset, state.model_dump_json(exclude={"messages"}), [m.model_dump_json() for m in new])


@dataclass
class Lease:
    journal: Journal
    record: RunRecord
    token: str
    deadline: float = 0.0
    """Wall-clock time (``time.time()``) at which the lease lapses unless renewed; 0 for an owner."""
    lost: bool = False
    held: Held | None = None
    """The last checkpoint, held back to be written by :meth:`finish` (see :meth:`hold`)."""

    @property
    def run_id(self) -> str:
        return self.record.id

    # -- writes (each fenced by ``token`` in its script) ----------------------------------------

    async def checkpoint(
        self, offset: int, state: RunState, new: list[Message], status: str, events: str = "", *,
        rewrite: bool = False,
    ) -> tuple[int, bool]:
        """Append ``new`` after ``offset`` journaled messages, store ``state`` and write the
        ``events`` batch, in one round trip; returns (journaled count, tree canceled). The run's
        ``stop`` reason (fail-fast) comes back in the same answer, into :attr:`record`.

        ``rewrite``: the chat was rewritten in place (an effect compacted or trimmed it), so
        ``new`` is the whole chat and replaces the journaled messages, in the same atomic step
        (still refused unless the journal holds exactly ``offset`` messages)."""
        return await self.journal._checkpoint_run(self, offset, state, new, status, events, rewrite)

    def hold(self, offset: int, state: RunState, new: list[Message]) -> None:
        """Keep the run's last checkpoint (``new`` after ``offset``, ``state`` as it is now) for
        :meth:`finish` to write first, atomically, in its own round trip. Only for a step whose
        redo is harmless — a crash before the finish loses the held write, so the run continues
        from its previous checkpoint, as after a crash in the step itself. :meth:`write_held`
        writes it on its own when the run does not finish after all."""
        self.held = Held.of(offset, state, new)

    async def write_held(self, events: str = "") -> None:
        """Write the held checkpoint now (a run that ends some other way than :meth:`finish`)."""
        held, self.held = self.held, None
        if held is not None:
            await self.journal._write_held(self, held, events)

    async def expect(
        self, requests: list[ChildRequest], iteration: int, fingerprint: str
    ) -> tuple[list[str], list[str]]:
        """Register the children before enqueueing; returns (all child ids, ids not started yet)."""
        return await self.journal._expect_children(self, requests, iteration, fingerprint)

    async def release(self) -> int:
        """Let a suspended run go; returns the children still pending (0: keep going now)."""
        return await self.journal._release_run(self)

    async def finish(self, status: str, result: dict[str, Any], *, events: str = "", **fields: str) -> tuple[int, str]:
        """End the run (writing its last ``events``) and join its result into its parent; returns
        (children left, parent mode). ``left == 0``: this call completed the join and the caller
        enqueues the parent's resume. Finishing a run already terminal is a no-op (``-1``). A
        checkpoint :meth:`hold` kept is written first, in the same atomic step."""
        return await self.journal._finish_run(self, status, result, events, fields)

    async def drop(self) -> None:
        """Give the run up after a failed attempt, so a retry need not wait out the lease."""
        await self.journal._drop_lease(self)

    # -- keeping it -----------------------------------------------------------------------------

    async def renew(self) -> bool:
        """Extend the lease; False when someone else holds the run now."""
        ok = await self.journal._renew(self)
        if ok:
            self.deadline = time.time() + self.journal.settings.lease
        return ok

    @contextlib.asynccontextmanager
    async def heartbeat(self, step: asyncio.Task[Any]) -> AsyncIterator[None]:
        """Keep the lease while the body runs (the process's :class:`~.renewer.Renewer` renews it
        from its own thread); if it is lost, it is marked and ``step`` cancelled."""
        renewer = self.journal.renewer
        renewer.hold(self, step)
        try:
            yield
        finally:
            renewer.release(self)
