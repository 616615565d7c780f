"""Proactive throttling: stay under a provider's requests-per-minute and tokens-per-minute.

A one-minute sliding window (Shelly's ``RateLimitedCompleter``) over requests, input tokens and
output tokens. A call reserves its slot *before* it starts — with the input tokens estimated from
the chat (Shelly's ``TokenEstimator``: chars/4 rounded up, +4 per message, +10 per tool) — and
corrects the reservation with the real usage when the reply comes back.

Unlike Shelly, no lock is held across the request (Shelly's ``completeMu`` serialised every call
through one limiter): the bookkeeping lock is taken only to read and update the window, and a
caller that must wait sleeps outside it, then checks again. Concurrent calls that fit the window
run concurrently. Clock and sleep are injectable for tests.
"""

from __future__ import annotations

import asyncio
import math
import re
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable

from pydantic import BaseModel, field_validator

from shelly_dist.chats import Chat, Message, Text, ToolCall, ToolResult
from shelly_dist.models.completer import Completer, ToolSpec
from shelly_dist.models.usage import Usage, UsageTracker

WINDOW = 60.0
"""Seconds of the sliding window: the limits are per minute."""

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


class RateLimitSettings(BaseModel):
    """A provider's ``rate_limit`` block. Zero means "no limit" for the window sizes."""

    input_tpm: int = 0
    output_tpm: int = 0
    rpm: int = 0
    max_retries: int = 3
    base_delay: float = 1.0
    """Seconds; also accepts Go-style durations such as ``"1s"`` or ``"500ms"``."""

    @field_validator("base_delay", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        if isinstance(value, str):
            m = _DURATION.match(value)
            if not m:
                raise ValueError(f"not a duration: {value!r} (use seconds or e.g. '500ms', '2s')")
            return float(m.group(1)) * _UNIT[m.group(2)]
        return value

    @property
    def throttles(self) -> bool:
        """Whether any window limit is set (otherwise no limiter is needed)."""
        return bool(self.input_tpm or self.output_tpm or self.rpm)


def _part_chars(part: object) -> int:
    if isinstance(part, Text):
        return len(part.text)
    if isinstance(part, ToolCall):
        return len(part.name) + len(part.arguments)
    if isinstance(part, ToolResult):
        return len(part.content)
    return 0


def estimate_tokens(messages: list[Message], tools: list[ToolSpec]) -> int:
    """Shelly's estimate of a request's input tokens."""
    chars = sum(_part_chars(p) for m in messages for p in m.parts)
    return math.ceil(chars / 4) + 4 * len(messages) + 10 * len(tools)


class _Slot:
    __slots__ = ("at", "input", "output")

    def __init__(self, at: float, input_tokens: int) -> None:
        self.at = at
        self.input = input_tokens
        self.output = 0


class RateLimiter:
    """The sliding window. ``acquire`` waits for room; ``settle`` records what a call really used."""

    def __init__(
        self,
        settings: RateLimitSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._slots: deque[_Slot] = deque()

    def _wait_needed(self, now: float, estimate: int) -> float:
        while self._slots and self._slots[0].at <= now - WINDOW:
            self._slots.popleft()
        if not self._slots:
            return 0.0
        s = self.settings
        oldest = self._slots[0].at + WINDOW - now
        if s.rpm and len(self._slots) >= s.rpm:
            return oldest
        if s.input_tpm and sum(x.input for x in self._slots) + estimate > s.input_tpm:
            return oldest
        if s.output_tpm and sum(x.output for x in self._slots) >= s.output_tpm:
            return oldest
        return 0.0

    async def acquire(self, estimate: int) -> _Slot:
        """Wait until a call of ``estimate`` input tokens fits the window, and reserve it.

        A call larger than the whole input budget still goes through once the window is empty.
        """
        while True:
            with self._lock:
                now = self._clock()
                wait = self._wait_needed(now, estimate)
                if wait <= 0:
                    slot = _Slot(now, estimate)
                    self._slots.append(slot)
                    return slot
            await self._sleep(wait)

    def settle(self, slot: _Slot, usage: Usage | None) -> None:
        """Replace the slot's estimate by the call's real usage (``None``: the call failed)."""
        with self._lock:
            if usage is not None:
                slot.input = usage.input_tokens + usage.cache_creation_tokens + usage.cache_read_tokens
                slot.output = usage.output_tokens


class ThrottledCompleter:
    """Wraps ``inner`` so that every call first gets room in ``limiter``'s window."""

    def __init__(self, inner: Completer, limiter: RateLimiter) -> None:
        self.inner = inner
        self.limiter = limiter

    @property
    def usage(self) -> UsageTracker | None:
        return getattr(self.inner, "usage", None)

    async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
        slot = await self.limiter.acquire(estimate_tokens(list(chat.view()), tools))
        reply: Message | None = None
        try:
            reply = await self.inner.complete(chat, tools)
            return reply
        finally:
            self.limiter.settle(slot, Usage.of(reply) if reply is not None else None)
