"""The governor's accounts in this process (embedded runs): the algorithm the Redis store runs in
Lua (``state/governor.py``), step for step, so both stores decide alike (one suite of tests runs
against both: ``tests/unit/models/test_governor_store.py``).

Each step takes the account's lock only to read and update it, never across a call or a wait
(STYLE "hidden locks"). See :mod:`.base` for what the account holds and why.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace

from shelly_dist.models.governor.base import (
    BATCH,
    BOUND,
    GRACE,
    INTERACTIVE,
    WINDOW,
    Ask,
    Decision,
    KeyLimits,
    Learned,
    Settle,
)

WALK = 200
"""Window entries a token limit's wait looks at, oldest first (the wait is then an under-estimate:
the caller comes back early and waits again; the look stays bounded)."""

HEAD = 64
"""Queue entries looked at for an earlier caller whose turn is near (bounded, whatever the queue)."""

STEP = 1e10
"""Score distance between priorities in the queue (tags are epoch seconds): every ``interactive``
waiter ranks before every ``batch`` one; within a priority, by fair-share tag. Scores stay within
14 significant digits (Lua's number formatting), a millisecond's resolution."""

TOLERANCE = 0.5
"""Seconds a ``batch`` grant may come before its pace says (GCRA's tolerance): a waiter that wakes
late by up to this much still takes its slot instead of pushing every later one back. The sliding
window is the hard cap either way."""

SPIN = 0.05
"""The least a caller behind a waiter that is there waits before asking again (seconds)."""

HERE = 0.5
"""Seconds past its turn a waiter told to wait in its process still counts as there (its next ask
arrives a little after its turn)."""

EPSILON = 0.001
"""The least a call moves its share's tag (unlimited units): its next calls rank after it."""


def effective(config: KeyLimits, learned: KeyLimits) -> KeyLimits:
    """The limits that hold: the config's, and where it sets none, the vendor's as heard."""
    return KeyLimits(rpm=config.rpm or learned.rpm, input_tpm=config.input_tpm or learned.input_tpm,
                     output_tpm=config.output_tpm or learned.output_tpm,
                     max_concurrent=config.max_concurrent or learned.max_concurrent)


def pacing(limits: KeyLimits, tokens: int) -> float:
    """Seconds a ``batch`` grant of ``tokens`` input tokens moves the unit's pace (GCRA)."""
    step = WINDOW / limits.rpm if limits.rpm else 0.0
    if limits.input_tpm:
        step = max(step, tokens * WINDOW / limits.input_tpm)
    return step


def scaled(tokens: int, ratio: float) -> int:
    """An estimate of ``tokens`` as the vendor will count them."""
    return max(1, int(tokens * ratio + 0.5))


def learn_ratio(old: float, seen: float) -> float:
    """The ratio's moving average after a call that counted ``seen`` per estimated token (each
    call is bounded to 0.1–20, so one odd answer cannot make the next reservations absurd)."""
    return 0.8 * old + 0.2 * min(20.0, max(0.1, seen))


def spacing(limits: KeyLimits, tokens: int, latency: float) -> float:
    """Seconds between two waiters' turns (what one waiter ahead costs): the pace, or with only a
    concurrency limit the call's latency shared by its slots."""
    step = pacing(limits, tokens)
    if not step and limits.max_concurrent:
        step = max(latency, 0.1) / limits.max_concurrent
    return step


@dataclass
class _Grant:
    at: float
    tokens_in: int
    tokens_out: int = 0


@dataclass
class _Waiter:
    score: float
    due: float
    deadline: float
    here: float = 0.0
    """Until when it waits in its process (it was told to wait within the bound): only a waiter
    that is there goes before a caller who finds room (a suspended one may come back late)."""


@dataclass
class _Account:
    log: OrderedDict[str, _Grant] = field(default_factory=OrderedDict)
    tokens_in: int = 0
    tokens_out: int = 0
    flying: dict[str, float] = field(default_factory=dict)
    pause: float = 0.0
    tat: float = 0.0
    """The batch pace of requests (GCRA's theoretical arrival time)."""
    tat_in: float = 0.0
    """The batch pace of input tokens (estimated at the grant, corrected at settle)."""
    tat_out: float = 0.0
    """The batch pace of output tokens (known at settle)."""
    latency: float = 0.0
    finish: dict[str, tuple[float, float]] = field(default_factory=dict)
    queue: dict[str, _Waiter] = field(default_factory=dict)
    learned: KeyLimits = field(default_factory=KeyLimits)
    ratio: float = 1.0
    """What the vendor counts per token of Shelly's estimate (learned at settle, a moving average):
    a grant reserves the estimate times this, so the window and the pace count what the vendor will."""

    def trim(self, now: float) -> None:
        while self.log:
            gid, grant = next(iter(self.log.items()))
            if grant.at > now - WINDOW:
                break
            del self.log[gid]
            self.tokens_in -= grant.tokens_in
            self.tokens_out -= grant.tokens_out
        for fid in [f for f, expiry in self.flying.items() if expiry <= now]:
            del self.flying[fid]
        for wid in [w for w, waiter in self.queue.items() if waiter.deadline < now]:
            del self.queue[wid]
        for share in [s for s, (_, expiry) in self.finish.items() if expiry <= now]:
            del self.finish[share]

    def capacity(self, ask: Ask, limits: KeyLimits, now: float) -> tuple[float, str]:
        """Seconds until the unit has room for ``ask`` (0: now), and which limit is short."""
        if self.pause > now:
            return self.pause - now, "paused"
        grants = list(self.log.values())
        if limits.rpm and len(grants) >= limits.rpm:
            return grants[len(grants) - limits.rpm].at + WINDOW - now, "rpm"
        if limits.input_tpm and self.tokens_in > 0 and self.tokens_in + ask.tokens > limits.input_tpm:
            return self._freed(grants, now, lambda g: g.tokens_in,
                               self.tokens_in + ask.tokens - limits.input_tpm), "input_tpm"
        if limits.output_tpm and self.tokens_out >= limits.output_tpm:
            return self._freed(grants, now, lambda g: g.tokens_out,
                               self.tokens_out - limits.output_tpm + 1), "output_tpm"
        if limits.max_concurrent and len(self.flying) >= limits.max_concurrent:
            return max(self.latency, 0.1) / limits.max_concurrent, "max_concurrent"
        if ask.priority == BATCH:
            paced, limit = max((self.tat, "rpm"), (self.tat_in, "input_tpm"), (self.tat_out, "output_tpm"))
            if paced - TOLERANCE > now:
                return paced - TOLERANCE - now, limit
        return 0.0, ""

    @staticmethod
    def _freed(grants: list[_Grant], now: float, amount: object, needed: int) -> float:
        freed, last = 0, now - WINDOW
        for grant in grants[:WALK]:
            freed += amount(grant)  # type: ignore[operator]
            last = grant.at
            if freed >= needed:
                break
        return max(0.0, last + WINDOW - now)

    def blocked(self, score: float, me: str, now: float) -> bool:
        """Whether a waiter ranked before ``score`` waits in its process for its turn (it goes first)."""
        for s, here, wid in sorted((w.score, w.here, wid) for wid, w in self.queue.items())[:HEAD]:
            if s >= score:
                return False
            if wid != me and here >= now:
                return True
        return False

    def rank(self, score: float, me: str) -> int:
        """Waiters before ``me`` (by score, then id: a sorted set's order)."""
        return sum(1 for wid, w in self.queue.items() if (w.score, wid) < (score, me))


def _class(priority: str) -> int:
    return 0 if priority == INTERACTIVE else 1


class MemoryGovernorStore:
    """:class:`~.base.GovernorStore` in this process; safe to share between threads and loops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._units: dict[str, _Account] = {}

    def _account(self, unit: str) -> _Account:
        return self._units.setdefault(unit, _Account())

    async def reserve(self, ask: Ask, now: float) -> Decision:
        with self._lock:
            acc = self._account(ask.unit)
            acc.trim(now)
            ask = replace(ask, tokens=scaled(ask.tokens, acc.ratio))
            limits = effective(ask.limits, acc.learned)
            wait, reason = acc.capacity(ask, limits, now)
            cls = _class(ask.priority)
            share = ask.share or ask.id
            step = spacing(limits, ask.tokens, acc.latency)
            waiter = acc.queue.get(ask.id)
            if waiter is None:  # first seen: its fair-share tag (a virtual clock per share)
                tag = max(now, acc.finish.get(share, (0.0, 0.0))[0])
                acc.finish[share] = (tag + max(step, EPSILON), tag + step + 2 * WINDOW)
                score = cls * STEP + tag
            else:
                score = waiter.score
            if wait <= 0 and acc.blocked(score, ask.id, now):
                wait, reason = max(step, SPIN), "queue"
            if wait <= 0:
                acc.queue.pop(ask.id, None)
                acc.log[ask.id] = _Grant(now, ask.tokens)
                acc.tokens_in += ask.tokens
                acc.flying[ask.id] = now + ask.timeout
                if ask.priority == BATCH:
                    if limits.rpm:
                        acc.tat = max(acc.tat, now) + WINDOW / limits.rpm
                    if limits.input_tpm:
                        acc.tat_in = max(acc.tat_in, now) + ask.tokens * WINDOW / limits.input_tpm
                return Decision(True)
            turn = wait + acc.rank(score, ask.id) * step
            acc.queue[ask.id] = _Waiter(score, now + turn, now + turn + GRACE,
                                        now + turn + HERE if turn <= BOUND else 0.0)
            return Decision(False, turn, reason)

    async def settle(self, settle: Settle, now: float) -> None:
        with self._lock:
            acc = self._account(settle.unit)
            acc.flying.pop(settle.id, None)
            if settle.latency > 0:
                acc.latency = settle.latency if not acc.latency else 0.8 * acc.latency + 0.2 * settle.latency
            grant = acc.log.get(settle.id)
            reserved = grant.tokens_in if grant is not None else scaled(settle.estimated, acc.ratio)
            real_in = reserved if settle.input_tokens is None else settle.input_tokens
            if settle.input_tokens and settle.estimated > 0:
                acc.ratio = learn_ratio(acc.ratio, settle.input_tokens / settle.estimated)
            if grant is not None:
                acc.tokens_in += real_in - grant.tokens_in
                acc.tokens_out += settle.output_tokens - grant.tokens_out
                grant.tokens_in, grant.tokens_out = real_in, settle.output_tokens
            if settle.priority == BATCH:
                limits = effective(settle.limits, acc.learned)
                if limits.input_tpm:
                    acc.tat_in += (real_in - reserved) * WINDOW / limits.input_tpm
                if limits.output_tpm:
                    acc.tat_out = max(acc.tat_out, now) + settle.output_tokens * WINDOW / limits.output_tpm

    async def learn(self, unit: str, learned: Learned, now: float) -> None:
        with self._lock:
            acc = self._account(unit)
            if learned.limits.any():
                old = acc.learned
                acc.learned = KeyLimits(rpm=learned.limits.rpm or old.rpm,
                                        input_tpm=learned.limits.input_tpm or old.input_tpm,
                                        output_tpm=learned.limits.output_tpm or old.output_tpm,
                                        max_concurrent=old.max_concurrent)
            acc.pause = max(acc.pause, learned.pause_until)

    async def limits(self, unit: str) -> KeyLimits:
        with self._lock:
            acc = self._units.get(unit)
            return acc.learned if acc is not None else KeyLimits()
