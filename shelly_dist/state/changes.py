"""Wake-up hints for watches: the in-process signal, and the loop rule every watch follows.

A watch never trusts a notification to carry the truth (DESIGN.md §3, rule 6). It *subscribes
first*, then reads, then waits for a hint *or* a short interval, then reads again. A hint that
never comes can delay a watch by one interval, never hang it; a hint that comes between the read
and the wait is not lost, because the subscription existed before the read.

:class:`Changes` is what a watch waits on. :class:`Signal` is the in-memory implementation:
Shelly's close-and-recreate channel, as an ``asyncio.Event`` that is set and replaced on every
change, so every listener wakes and nobody can miss the change made just before they waited.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol


class Changes(Protocol):
    """A live subscription to change hints."""

    async def wait(self, timeout: float | None) -> None:  # noqa: ASYNC109 - deadline is part of the contract
        """Return after a hint, after ``timeout`` seconds (``None``: an implementation-chosen
        poll interval or forever), or early for no reason. Callers must re-read either way."""
        ...


class Signal:
    """Wakes every listener on :meth:`notify`. Single event loop; notify from that loop only."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    @asynccontextmanager
    async def listen(self) -> AsyncIterator[Changes]:
        """Subscribe; the subscription sees every notify after this point."""
        yield _Listener(self)


class _Listener:
    def __init__(self, signal: Signal) -> None:
        self._signal = signal
        self._event = signal._event

    async def wait(self, timeout: float | None) -> None:  # noqa: ASYNC109 - deadline is part of the contract
        if not self._event.is_set():
            try:
                await asyncio.wait_for(self._event.wait(), timeout)
            except TimeoutError:
                pass
        # Re-arm before the caller re-reads, so a notify during the re-read is seen next time.
        self._event = self._signal._event


def deadline_after(timeout: float | None) -> float | None:
    """The monotonic deadline ``timeout`` seconds from now (``None`` stays ``None``)."""
    return None if timeout is None else time.monotonic() + timeout


def seconds_left(deadline: float | None) -> float | None:
    """Seconds until ``deadline`` (never negative); ``None`` when there is no deadline."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def soonest(*waits: float | None) -> float | None:
    """The smallest of the given waits, ignoring ``None`` (``None`` when all are)."""
    present = [w for w in waits if w is not None]
    return min(present) if present else None
