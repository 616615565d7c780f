"""What the vendors' answers say about a key's limits: their rate-limit headers, heard from the
transport while a governed call is made.

OpenAI (and Grok, and OpenAI-compatible servers that copy it) sends ``x-ratelimit-limit-requests``
and ``x-ratelimit-limit-tokens`` (the per-minute limits), ``x-ratelimit-remaining-…`` and
``x-ratelimit-reset-…`` (a duration: ``1s``, ``6m0s``, ``20ms``). Anthropic sends
``anthropic-ratelimit-{requests,input-tokens,output-tokens,tokens}-{limit,remaining,reset}`` (the
reset an RFC 3339 time). Every answer's limits are learned (used when the config sets none); a
``remaining`` of 0 pauses the key until its reset; a 429's ``retry-after`` (or the reset of the
exhausted limit) pauses it until then.

The transport reports the headers of each answer to :func:`heard`; only a call made inside
:func:`hearing` (the governor's) listens, so nothing is kept otherwise.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime

from shelly_dist.models.governor.base import KeyLimits, Learned

PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-", "retry-after")
"""Lower-cased header names the transport passes on (nothing else of an answer is kept)."""

_listener: ContextVar[Callable[[Mapping[str, str]], None] | None] = ContextVar("shelly_rate_headers", default=None)

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


@contextmanager
def hearing(listener: Callable[[Mapping[str, str]], None]) -> Iterator[None]:
    """Have the rate-limit headers of the answers received in the body handed to ``listener``."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


def heard(headers: Mapping[str, str]) -> None:
    """The transport's report of one answer's headers (a no-op when nobody listens)."""
    listener = _listener.get()
    if listener is None:
        return
    kept = {k.lower(): v for k, v in headers.items() if k.lower().startswith(PREFIXES)}
    if kept:
        listener(kept)


def seconds(value: str, now: float) -> float | None:
    """A reset as the vendors write it: a duration (``6m0s``, ``20ms``, ``1.5``), or an RFC 3339
    time (Anthropic); seconds from ``now``, ``None`` when unreadable."""
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    parts = _PART.findall(value)
    if parts and "".join(n + u for n, u in parts) == value:
        return sum(float(n) * _UNIT[u] for n, u in parts)
    try:
        return max(0.0, datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() - now)
    except ValueError:
        return None


def _int(headers: Mapping[str, str], name: str) -> int:
    try:
        return int(float(headers.get(name, "") or 0))
    except ValueError:
        return 0


def learned_from(headers: Mapping[str, str], now: float | None = None, *, rejected: bool = False,
                 retry_after: float | None = None) -> Learned:
    """The limits and pause ``headers`` say (see the module). ``rejected``: the answer was a 429
    (the key is paused for ``retry_after``, else the longest reset of an exhausted limit, else a
    second)."""
    now = time.time() if now is None else now
    oa, an = "x-ratelimit-", "anthropic-ratelimit-"
    limits = KeyLimits(
        rpm=_int(headers, oa + "limit-requests") or _int(headers, an + "requests-limit"),
        input_tpm=_int(headers, oa + "limit-tokens") or _int(headers, an + "input-tokens-limit")
        or _int(headers, an + "tokens-limit"),
        output_tpm=_int(headers, an + "output-tokens-limit"),
    )
    waits: list[float] = []
    for remaining, reset in ((oa + "remaining-requests", oa + "reset-requests"),
                             (oa + "remaining-tokens", oa + "reset-tokens"),
                             (an + "requests-remaining", an + "requests-reset"),
                             (an + "input-tokens-remaining", an + "input-tokens-reset"),
                             (an + "output-tokens-remaining", an + "output-tokens-reset"),
                             (an + "tokens-remaining", an + "tokens-reset")):
        if remaining in headers and _int(headers, remaining) <= 0 and reset in headers:
            wait = seconds(headers[reset], now)
            if wait is not None:
                waits.append(wait)
    pause = 0.0
    if rejected:
        told = retry_after if retry_after is not None else seconds(headers.get("retry-after", ""), now)
        pause = now + (told if told is not None else max(waits, default=1.0))
    elif waits:
        pause = now + max(waits)
    return Learned(limits=limits, pause_until=pause)
