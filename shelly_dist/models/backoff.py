"""Backoff: how long to wait before retry number ``n``.

Shelly's rule, kept exactly: ``max(base·2^n, Retry-After)`` with ±25 % jitter. The server's
Retry-After is a floor, never a ceiling: waiting less than it asked only earns another 429.
The random source is injectable so tests can pin the jitter to its midpoint.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """Exponential backoff with proportional jitter. ``rand`` returns a float in [0, 1)."""

    base: float = 1.0
    jitter: float = 0.25
    cap: float | None = None
    rand: Callable[[], float] = field(default=random.random, repr=False)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry ``attempt`` (0 for the first retry)."""
        wait = self.base * (2**attempt)
        if self.cap is not None:
            wait = min(wait, self.cap)
        wait = max(wait, retry_after or 0.0)
        return max(0.0, wait * (1 + self.jitter * (2 * self.rand() - 1)))
