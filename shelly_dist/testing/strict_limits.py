"""A strict vendor's rate limits, for the loopback model server: what a real key does to a pool.

:class:`StrictLimits` enforces requests per minute and input tokens per minute over a sliding
window (any ``window`` seconds holding more than the limit is refused), the strictest reading of
the vendors' limits; refuses with a 429, ``retry-after`` (whole seconds, rounded up, until the
request would fit) and OpenAI's ``x-ratelimit-*`` headers (Anthropic's ``anthropic-ratelimit-*``
on its path); and, with ``headers``, tells every answer the limits and what remains, as the vendors
do. :meth:`StrictLimits.reject_all` makes it answer 429 with a fixed ``retry-after`` to everything
for a while (an overloaded vendor, a key suspended for a moment). Refused requests do not count
against the window (the vendors do not charge them).

Thread-safe: the server answers requests on threads of its own. Its records
(:attr:`StrictLimits.accepted`, :attr:`StrictLimits.rejected`) are what tests and the bench read.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from shelly_dist.testing.server_rules import tokens


@dataclass
class Verdict:
    """A request's fate: accepted (``status`` 200) or refused, with the headers to send either way,
    and the input tokens the request was charged (what the answer reports as its usage)."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    tokens: int = 0


class StrictLimits:
    """Requests and input tokens per ``window`` seconds (0: no limit of that kind)."""

    def __init__(self, *, rpm: int = 0, input_tpm: int = 0, window: float = 60.0, headers: bool = True,
                 clock: Any = time.monotonic) -> None:
        self.rpm = rpm
        self.input_tpm = input_tpm
        self.window = window
        self.headers = headers
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: deque[tuple[float, int]] = deque()
        self._reject_until = 0.0
        self._reject_after = 0
        self.accepted: list[float] = []
        """Arrival times (the clock's) of the requests accepted."""
        self.rejected: list[float] = []
        """Arrival times of the requests refused with a 429."""
        self.charged = 0
        """Input tokens of the requests accepted (characters / 4 of their bodies)."""

    def reject_all(self, seconds: float) -> None:
        """From now, answer 429 with ``retry-after: <seconds>`` to every request for ``seconds``."""
        with self._lock:
            self._reject_until = self._clock() + seconds
            self._reject_after = math.ceil(seconds)

    def judge(self, body: Any, anthropic: bool = False) -> Verdict:
        """Accept or refuse one request (its body gives its input tokens: characters / 4)."""
        size = tokens(str(body)) if self.input_tpm else 0
        with self._lock:
            now = self._clock()
            while self._seen and self._seen[0][0] <= now - self.window:
                self._seen.popleft()
            if now < self._reject_until:
                self.rejected.append(now)
                wait = self._reject_after
                return Verdict(429, {"retry-after": str(wait), **self._said(now, wait, anthropic)})
            count, used = len(self._seen), sum(t for _, t in self._seen)
            wait = 0.0
            if self.rpm and count >= self.rpm:
                wait = self._seen[count - self.rpm][0] + self.window - now
            if self.input_tpm and used and used + size > self.input_tpm:
                freed, need = 0, used + size - self.input_tpm
                for at, t in self._seen:
                    freed += t
                    if freed >= need:
                        wait = max(wait, at + self.window - now)
                        break
            if wait > 0:
                self.rejected.append(now)
                return Verdict(429, {"retry-after": str(math.ceil(wait)), **self._said(now, wait, anthropic)})
            self._seen.append((now, size))
            self.accepted.append(now)
            self.charged += size
            return Verdict(200, self._said(now, 0.0, anthropic) if self.headers else {}, size)

    def _said(self, now: float, wait: float, anthropic: bool) -> dict[str, str]:
        """The vendor's rate-limit headers: limits, what remains, when it resets."""
        left = max(0, self.rpm - len(self._seen)) if self.rpm else 0
        reset = wait or (self._seen[0][0] + self.window - now if self._seen else 0.0)
        out: dict[str, str] = {}
        if anthropic:
            if self.rpm:
                out |= {"anthropic-ratelimit-requests-limit": str(self.rpm),
                        "anthropic-ratelimit-requests-remaining": str(left),
                        "anthropic-ratelimit-requests-reset": time.strftime(
                            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + reset))}
            if self.input_tpm:
                out["anthropic-ratelimit-input-tokens-limit"] = str(self.input_tpm)
            return out
        if self.rpm:
            out |= {"x-ratelimit-limit-requests": str(self.rpm), "x-ratelimit-remaining-requests": str(left),
                    "x-ratelimit-reset-requests": f"{reset:.3f}s"}
        if self.input_tpm:
            out["x-ratelimit-limit-tokens"] = str(self.input_tpm)
        return out

    def max_in_any_window(self) -> int:
        """The most requests accepted within any ``window`` seconds (what a vendor's minute saw)."""
        times = sorted(self.accepted)
        best, start = 0, 0
        for end, at in enumerate(times):
            while times[start] <= at - self.window:
                start += 1
            best = max(best, end - start + 1)
        return best
