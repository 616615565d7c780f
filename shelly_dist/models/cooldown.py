"""Cooldown: a provider (or one of its API keys) that keeps failing is left alone for a while.

Each failure class has its own ladder, climbed one step per consecutive failure and reset by a
success: transient errors wait 1 → 5 → 25 → 60 minutes, billing errors 5 → 24 hours. A new
failure never shortens a cooldown already running (a transient error during a billing cooldown
keeps the billing one).

The state must live where the runtime's state lives, so every worker skips the same cooling
provider: :class:`MemoryCooldownStore` in-process, ``shelly_dist.runtime.redis_cooldown`` when
distributed. Both implement :class:`CooldownStore`; updates are atomic (a lock here, a Lua script
there). Times are wall-clock epoch seconds because they are shared between machines.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Protocol, runtime_checkable

TRANSIENT_STEPS: tuple[float, ...] = (60.0, 300.0, 1500.0, 3600.0)
"""Seconds of cooldown after the 1st, 2nd, 3rd and later consecutive transient failures."""

BILLING_STEPS: tuple[float, ...] = (5 * 3600.0, 24 * 3600.0)
"""Seconds of cooldown after the 1st and later consecutive billing failures."""


def steps_for(billing: bool) -> tuple[float, ...]:
    return BILLING_STEPS if billing else TRANSIENT_STEPS


def key_id(provider: str, api_key: str) -> str:
    """The cooldown key of one API key of a provider; the key itself is never stored, only a hash."""
    return f"{provider}#key-{hashlib.sha256(api_key.encode()).hexdigest()[:12]}"


@runtime_checkable
class CooldownStore(Protocol):
    """Shared cooldown state, by key (a provider name, or :func:`key_id`)."""

    async def cooling_until(self, key: str) -> float:
        """Epoch seconds until which ``key`` cools down; 0 when it never failed or was reset."""
        ...

    async def record_failure(self, key: str, *, billing: bool, now: float) -> float:
        """Climb ``key``'s ladder one step from ``now``; return the (possibly longer) end of cooldown."""
        ...

    async def reset(self, key: str) -> None:
        """Forget ``key``'s failures (called after a success)."""
        ...


class MemoryCooldownStore:
    """In-process cooldowns; safe to share between threads and event loops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: dict[str, dict[str, float]] = {}

    async def cooling_until(self, key: str) -> float:
        with self._lock:
            return self._state.get(key, {}).get("until", 0.0)

    async def record_failure(self, key: str, *, billing: bool, now: float) -> float:
        field = "billing" if billing else "transient"
        steps = steps_for(billing)
        with self._lock:
            entry = self._state.setdefault(key, {})
            count = int(entry.get(field, 0)) + 1
            entry[field] = count
            until = max(entry.get("until", 0.0), now + steps[min(count, len(steps)) - 1])
            entry["until"] = until
            return until

    async def reset(self, key: str) -> None:
        with self._lock:
            self._state.pop(key, None)
