"""``max_concurrency``: how many instances of an agent run at once within a session.

One mechanism for both runtimes: a counting semaphore whose slots are *leases*. A holder takes a
slot for a deadline and renews it while it runs (:class:`SlotLease`); a holder that dies without
giving its slot back loses it when its lease lapses, because every acquire first evicts expired
holders. The protocol is :class:`Slots`; :class:`MemorySlots` serves one process (the embedded
runtime), :class:`shelly_dist.state.slots.RedisSlots` a worker pool (a sorted set of holder →
deadline, changed only by Lua scripts).

A slot is named by (session, agent) and held by a run id. Acquiring is re-entrant per holder
(``HELD``): a second delivery of the same run neither takes a second slot nor frees the first.
Only a caller that got ``NEW`` gives the slot back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from enum import IntEnum
from types import TracebackType
from typing import Protocol

from shelly_dist.cancellation import pause

DEFAULT_SLOT_LEASE = 15.0
"""Seconds a slot outlives its holder's last renewal: how long a crashed holder keeps it."""


class Acquired(IntEnum):
    """What a try to take a slot got."""

    FULL = 0
    NEW = 1
    HELD = 2
    """The holder already had the slot (renewed, not counted twice)."""


class Slots(Protocol):
    """Leased counting semaphores, one per (session, agent)."""

    async def try_acquire(self, session: str, agent: str, holder: str, limit: int, lease: float) -> Acquired:
        """Take a slot for ``lease`` seconds if fewer than ``limit`` live holders have one."""
        ...

    async def renew(self, session: str, agent: str, holder: str, lease: float) -> bool:
        """Push the holder's deadline ``lease`` seconds out; False when the slot was lost."""
        ...

    async def release(self, session: str, agent: str, holder: str) -> None:
        """Give the slot back (nothing when not held)."""
        ...


class MemorySlots:
    """In-process slots; :meth:`acquire` waits for one (the embedded runtime may block a child,
    which is an asyncio task, not a worker)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._holders: dict[tuple[str, str], dict[str, float]] = {}
        self._changed = asyncio.Condition()

    def _live(self, session: str, agent: str) -> dict[str, float]:
        holders = self._holders.setdefault((session, agent), {})
        now = self._clock()
        for holder in [h for h, deadline in holders.items() if deadline <= now]:
            del holders[holder]
        return holders

    async def try_acquire(self, session: str, agent: str, holder: str, limit: int, lease: float) -> Acquired:
        holders = self._live(session, agent)
        if holder in holders:
            holders[holder] = self._clock() + lease
            return Acquired.HELD
        if len(holders) >= limit:
            return Acquired.FULL
        holders[holder] = self._clock() + lease
        return Acquired.NEW

    async def acquire(self, session: str, agent: str, holder: str, limit: int, lease: float) -> Acquired:
        """Wait until a slot is free (or an expired holder's lease lapses) and take it."""
        async with self._changed:
            while True:
                got = await self.try_acquire(session, agent, holder, limit, lease)
                if got != Acquired.FULL:
                    return got
                deadlines = self._holders[(session, agent)].values()
                wait = max(0.0, min(deadlines) - self._clock()) if deadlines else None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), wait)

    async def renew(self, session: str, agent: str, holder: str, lease: float) -> bool:
        holders = self._live(session, agent)
        if holder not in holders:
            return False
        holders[holder] = self._clock() + lease
        return True

    async def release(self, session: str, agent: str, holder: str) -> None:
        self._holders.get((session, agent), {}).pop(holder, None)
        async with self._changed:
            self._changed.notify_all()


class SlotLease:
    """A slot already taken, renewed in the background while the block runs, given back at its
    end when this holder took it (``NEW``). Renewal every third of the lease keeps a live holder's
    slot however long it runs; a holder killed outright stops renewing and its slot lapses."""

    def __init__(self, slots: Slots, session: str, agent: str, holder: str, got: Acquired, lease: float) -> None:
        self._slots = slots
        self._key = (session, agent, holder)
        self._got = got
        self._lease = lease
        self._renewer: asyncio.Task[None] | None = None

    async def _renew(self) -> None:
        while True:
            await pause(self._lease / 3)
            with contextlib.suppress(Exception):  # a Redis blip: the next round tries again
                await self._slots.renew(*self._key, self._lease)

    async def __aenter__(self) -> SlotLease:
        self._renewer = asyncio.create_task(self._renew())
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        if self._got == Acquired.NEW:
            await asyncio.shield(self._slots.release(*self._key))
