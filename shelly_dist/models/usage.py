"""Token usage and its cost: per call, added up per agent and per run, safe under concurrency.

No lock is ever held across a model call (Shelly's per-provider usage lock serialised concurrent
sub-agents; shelly-dist does not): each reply carries its own usage, and trackers only add.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING

from pydantic import BaseModel

if TYPE_CHECKING:  # annotations only
    from shelly_dist.chats import Message


USAGE_KEY = "usage"


class Usage(BaseModel):
    """Tokens of one call, or a sum of calls."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_tokens: int = 0
    cache_read_tokens: int = 0
    cost_usd: float = 0.0
    """USD, from the price table at the model that answered (0 for a model it does not know)."""
    model_requests: int = 0
    """Model calls summed here: the agent loop counts each of its calls as one (a provider's
    retries inside a call are not counted again)."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_creation_tokens=self.cache_creation_tokens + other.cache_creation_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
            model_requests=self.model_requests + other.model_requests,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_creation_tokens + self.cache_read_tokens

    @classmethod
    def of(cls, message: Message) -> Usage:
        """The usage a completer recorded on ``message`` (zero when none)."""
        raw = message.metadata.get(USAGE_KEY)
        return cls.model_validate(raw) if isinstance(raw, dict) else cls()

    def attach(self, message: Message) -> Message:
        """Record this usage on ``message`` and return it."""
        message.metadata[USAGE_KEY] = self.model_dump()
        return message


class UsageTracker:
    """Running total plus the last ``keep`` calls. ``add`` may be called from any thread."""

    def __init__(self, keep: int = 100) -> None:
        self._lock = threading.Lock()
        self._total = Usage()
        self._count = 0
        self._recent: deque[Usage] = deque(maxlen=keep)

    def add(self, usage: Usage) -> None:
        with self._lock:
            self._total = self._total + usage
            self._count += 1
            self._recent.append(usage)

    def total(self) -> Usage:
        with self._lock:
            return self._total.model_copy()

    def last(self) -> Usage | None:
        with self._lock:
            return self._recent[-1].model_copy() if self._recent else None

    def count(self) -> int:
        with self._lock:
            return self._count

    def reset(self) -> None:
        with self._lock:
            self._total = Usage()
            self._count = 0
            self._recent.clear()
