"""The in-process ledger of the embedded runtime.

Atomic because a reservation checks and adds without awaiting anything (one event loop never
interleaves it), and under a lock for callers on other threads; the lock is never held across I/O.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from shelly_dist.agent.limits.base import LIMIT_NAMES, BudgetScope, Charge, Refusal

EPSILON = 1e-9
"""Slack for float cost sums (0.1 + 0.2 must not pass a limit of 0.3)."""


def _add(a: Charge, b: Charge, sign: int = 1) -> Charge:
    return Charge(a.model_requests + sign * b.model_requests, a.total_tokens + sign * b.total_tokens,
                  a.cost_usd + sign * b.cost_usd)


class MemoryLedger:
    """:class:`~shelly_dist.agent.limits.BudgetLedger` in a dict."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._used: dict[str, Charge] = {}
        self._reserved: dict[str, Charge] = {}

    async def reserve(self, scopes: Sequence[BudgetScope], charge: Charge) -> Refusal | None:
        with self._lock:
            for scope in scopes:
                used = self._used.get(scope.id, Charge())
                held = self._reserved.get(scope.id, Charge())
                for name, limit, u, r, c in zip(LIMIT_NAMES, scope.limits.values(), used.values(), held.values(),
                                                charge.values(), strict=True):
                    if limit > 0 and u + r + c > limit + EPSILON:
                        return Refusal(scope.id, name, limit)
            for scope in scopes:
                self._reserved[scope.id] = _add(self._reserved.get(scope.id, Charge()), charge)
        return None

    async def settle(self, scopes: Sequence[BudgetScope], reserved: Charge, actual: Charge) -> None:
        with self._lock:
            for scope in scopes:
                self._reserved[scope.id] = _add(self._reserved.get(scope.id, Charge()), reserved, -1)
                self._used[scope.id] = _add(self._used.get(scope.id, Charge()), actual)

    async def spent(self, scope: str) -> tuple[Charge, Charge]:
        with self._lock:
            return self._used.get(scope, Charge()), self._reserved.get(scope, Charge())
