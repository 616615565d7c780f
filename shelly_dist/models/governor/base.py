"""The provider governor's vocabulary: a key's limits, a reservation asked of it, the answer, and
the store that keeps a key's account (one protocol; a memory store embedded, Redis on a pool).

A *unit* is what a vendor limits: one API key of one provider, for one model (OpenAI and Anthropic
count per organisation and model; a unit per key and model is never looser than that). Its
account holds, over a sliding window of :data:`WINDOW` seconds (a minute, plus :data:`MARGIN` for
the time a granted request takes to reach the vendor): the requests granted, their input tokens
(estimated at the grant, corrected when the call is settled) and their output tokens (known at
settle); the calls in flight; a pause until which nothing is sent (a 429's ``retry-after``); the
limits learned from the vendor's headers; how many tokens the vendor counts per token of the
estimate (so a reservation counts what the vendor will); and the waiters' queue.

Why a sliding window and not GCRA alone: the vendors document token buckets, but what a strict
vendor (and our stand-in) refuses is any minute holding more than the limit, and a bucket full at
the start of a minute lets up to twice the limit through in that minute. The window is the hard
cap every priority obeys. ``batch`` work is also *paced* (GCRA, a clock each for requests, input
and output tokens: one request per ``WINDOW / rpm``, a call's input tokens spread over
``tokens × WINDOW / input_tpm``, output the same once known; a tolerance of half a second), so
a saturating batch leaves a slot free every pacing interval for an ``interactive`` call to take
first, instead of spending a whole minute's budget at once and leaving the key empty until the
minute ends (docs/benchmarks.md has both measured).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

WINDOW = 61.0
"""Seconds of the sliding window: the vendors' minute plus :data:`MARGIN`."""

MARGIN = 1.0
"""Seconds added to the vendors' minute: a request granted at ``t`` may reach the vendor later than
one granted after it (a slower connection, a busier process); counting each for a second longer
keeps every minute the vendor sees within the limit."""

BOUND = 2.0
"""Seconds a call may wait for its turn in its own process; a longer wait suspends the run (it
then holds no worker slot) with the turn as its due time."""

GRACE = 10.0
"""Seconds a waiter's place in the queue is kept past its turn: a suspended run comes back through
the reapers and the broker, late by a few seconds; one that never comes back (cancelled) stops
holding its place after this."""

INTERACTIVE = "interactive"
BATCH = "batch"
PRIORITIES = (INTERACTIVE, BATCH)
"""``interactive`` (``shelly run``, ``Session``, A2A, MCP) goes before ``batch`` (``shelly batch``)."""


@dataclass(frozen=True)
class KeyLimits:
    """A unit's limits (0: none). From the provider's ``rate_limit:``; a limit the config leaves at
    0 is the one learned from the vendor's headers, if any."""

    rpm: int = 0
    input_tpm: int = 0
    output_tpm: int = 0
    max_concurrent: int = 0

    def any(self) -> bool:
        return bool(self.rpm or self.input_tpm or self.output_tpm or self.max_concurrent)


@dataclass(frozen=True)
class Ask:
    """One reservation: a request of ``tokens`` estimated input tokens for ``unit``."""

    unit: str
    id: str
    """The reservation's id: the same for every attempt of one model call (its place in the queue)."""
    tokens: int
    priority: str = INTERACTIVE
    share: str = ""
    """Who shares the unit fairly within a priority: a batch, a root run (``""``: the id)."""
    limits: KeyLimits = field(default_factory=KeyLimits)
    timeout: float = 600.0
    """Seconds after which a call in flight that never settled stops counting as in flight."""


@dataclass(frozen=True)
class Decision:
    """The store's answer: granted now, or wait ``wait`` seconds for ``reason``."""

    granted: bool
    wait: float = 0.0
    reason: str = ""
    """What the call waits for: ``rpm``, ``input_tpm``, ``output_tpm``, ``max_concurrent``,
    ``paused`` (a 429), ``queue`` (earlier or higher-priority callers go first)."""


@dataclass(frozen=True)
class Settle:
    """What a granted call really used (``None`` tokens: it failed before the vendor answered)."""

    unit: str
    id: str
    estimated: int
    input_tokens: int | None
    output_tokens: int = 0
    priority: str = INTERACTIVE
    limits: KeyLimits = field(default_factory=KeyLimits)
    latency: float = 0.0


@dataclass(frozen=True)
class Learned:
    """What a vendor's headers said about a unit: its limits, and a pause (epoch seconds)."""

    limits: KeyLimits = field(default_factory=KeyLimits)
    pause_until: float = 0.0


class GovernorStore(Protocol):
    """Keeps every unit's account; each method is one atomic step, O(1) amortised in the number of
    calls (never in the number of waiting runs or processes)."""

    async def reserve(self, ask: Ask, now: float) -> Decision:
        """Grant ``ask`` now, or say how long to wait (its place in the queue is kept)."""
        ...

    async def settle(self, settle: Settle, now: float) -> None:
        """Replace a grant's estimate by what the call used; it is no longer in flight."""
        ...

    async def learn(self, unit: str, learned: Learned, now: float) -> None:
        """Record limits and a pause heard from the vendor (a pause only ever lengthens)."""
        ...

    async def limits(self, unit: str) -> KeyLimits:
        """The limits learned for ``unit`` (zero when none were heard)."""
        ...
