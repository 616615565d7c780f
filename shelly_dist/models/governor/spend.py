"""Spend limits that hold across a pool: USD per day and per month, per API key and per label.

A provider's ``spend:`` (``day_usd``, ``month_usd``) limits each of its keys; the config's top-level
``spend:`` maps a label — the share a tree belongs to: ``shelly batch --label nightly`` — to
limits of its own. Before a call, its most possible cost (its estimated input and its
``max_tokens`` at the model's price) is reserved in every scope's current day and month, all or
none, atomically (one Lua script on a pool: ``state/spend.py``); after it, the reservation is
replaced by the call's priced cost. A call that would cross a limit is refused before it is sent
(:class:`~shelly_dist.errors.SpendLimitExceeded`, naming the limit). Days and months are UTC.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, Field

from shelly_dist.errors import SpendLimitExceeded
from shelly_dist.models.pricing import PriceEntry
from shelly_dist.models.usage import Usage

PERIODS = (("day_usd", "d", "%Y%m%d", 2 * 86400), ("month_usd", "m", "%Y%m", 32 * 86400))
"""Each limit: its name, its period's tag, the period's label (UTC) and how long its total is kept."""


class SpendLimit(BaseModel):
    """USD a scope may spend per UTC day and per UTC month (0: no limit)."""

    day_usd: float = Field(0.0, ge=0)
    month_usd: float = Field(0.0, ge=0)

    def any(self) -> bool:
        return bool(self.day_usd or self.month_usd)


@dataclass(frozen=True)
class SpendScope:
    """One limited thing: ``name`` is its key in the ledger, ``title`` what an error calls it."""

    name: str
    title: str
    limit: SpendLimit


@dataclass(frozen=True)
class Refusal:
    scope: SpendScope
    limit: str
    spent: float

    def message(self, amount: float) -> str:
        bound = getattr(self.scope.limit, self.limit)
        return (f"spend limit: {self.scope.title} reached its {self.limit} {bound:.2f} (spent {self.spent:.4f} "
                f"USD this {'day' if self.limit == 'day_usd' else 'month'}, this call up to {amount:.4f})")


def periods(now: float) -> list[tuple[str, str, int]]:
    """``(limit name, period key, seconds to keep)`` of the periods ``now`` falls in."""
    t = time.gmtime(now)
    return [(name, f"{tag}{time.strftime(fmt, t)}", keep) for name, tag, fmt, keep in PERIODS]


class SpendLedger(Protocol):
    async def reserve(self, scopes: list[SpendScope], amount: float, now: float) -> Refusal | None:
        """Add ``amount`` to every scope's day and month, or to none: refused when one would pass
        its limit (the first such, with what it had spent)."""
        ...

    async def settle(self, scopes: list[SpendScope], reserved: float, actual: float, now: float) -> None:
        """Replace a reservation of ``reserved`` by the call's ``actual`` cost."""
        ...


class MemorySpendLedger:
    """:class:`SpendLedger` in this process (embedded runs)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spent: dict[tuple[str, str], float] = {}

    async def reserve(self, scopes: list[SpendScope], amount: float, now: float) -> Refusal | None:
        with self._lock:
            for scope in scopes:
                for name, period, _ in periods(now):
                    bound = getattr(scope.limit, name)
                    spent = self._spent.get((scope.name, period), 0.0)
                    if bound and spent + amount > bound + 1e-12:
                        return Refusal(scope, name, spent)
            for scope in scopes:
                for _, period, _ in periods(now):
                    self._spent[(scope.name, period)] = self._spent.get((scope.name, period), 0.0) + amount
            return None

    async def settle(self, scopes: list[SpendScope], reserved: float, actual: float, now: float) -> None:
        with self._lock:
            for scope in scopes:
                for _, period, _ in periods(now):
                    self._spent[(scope.name, period)] = self._spent.get((scope.name, period), 0.0) - reserved + actual


@dataclass
class Reserved:
    """One call's reservation: settled once with what the call cost."""

    ledger: SpendLedger
    scopes: list[SpendScope]
    amount: float
    at: float
    price: PriceEntry

    def price_of(self, usage: Usage) -> float:
        return usage.cost_usd or self.price.cost(usage)

    async def settle(self, actual: float) -> None:
        await self.ledger.settle(self.scopes, self.amount, actual, self.at)


@dataclass
class Spending:
    """A key's spend limits as a governed completer applies them: the ledger, the key's scope, the
    labels' limits, the model's price and its most output tokens."""

    ledger: SpendLedger
    key: SpendScope | None
    labels: dict[str, SpendLimit]
    price: PriceEntry
    max_output: int

    async def reserve(self, tokens: int, label: str, now: float, *, provider: str, model: str) -> Reserved | None:
        """Reserve a call of ``tokens`` estimated input for the key and the tree's ``label``;
        ``SpendLimitExceeded`` when a limit refuses it."""
        scopes = [self.key] if self.key is not None else []
        if label in self.labels:
            scopes.append(SpendScope(f"label:{label}", f'label "{label}"', self.labels[label]))
        if not scopes:
            return None
        amount = self.price.upper_bound(tokens, self.max_output)
        refusal = await self.ledger.reserve(scopes, amount, now)
        if refusal is not None:
            raise SpendLimitExceeded(f'provider "{provider}": {refusal.message(amount)}', provider=provider,
                                     model=model, limit=refusal.limit, scope=refusal.scope.title)
        return Reserved(self.ledger, scopes, amount, now, self.price)
