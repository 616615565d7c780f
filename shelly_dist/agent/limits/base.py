"""The records of tree limits and the ledger protocol both runtimes implement."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from shelly_dist.models.pricing import PriceEntry

LIMIT_NAMES = ("model_requests", "total_tokens", "cost_usd")
"""The dimensions of a limit, a charge and a ledger's totals, in this order everywhere."""


class Limits(BaseModel):
    """An agent's ``limits:`` (config); 0 means no limit on that dimension."""

    model_config = ConfigDict(extra="forbid")

    model_requests: int = Field(0, ge=0)
    """Model calls (a call's retries and fallbacks inside the provider chain count as one)."""
    total_tokens: int = Field(0, ge=0)
    """Input + output + cache-write + cache-read tokens, as the providers report them."""
    cost_usd: float = Field(0.0, ge=0)
    """USD at the price table (a model the table does not know costs 0)."""

    def any(self) -> bool:
        return any(getattr(self, n) for n in LIMIT_NAMES)

    def values(self) -> tuple[float, float, float]:
        return (self.model_requests, self.total_tokens, self.cost_usd)


class BudgetScope(BaseModel):
    """One bounded subtree: the run that opened it (its id) and the limits of that run's agent.

    The limits travel with the scope (on each child request and in the run state), so a worker
    that rebuilds a run needs nothing but the run to know what it must reserve against.
    """

    id: str
    limits: Limits

    def describe(self) -> str:
        return f"tree of run {self.id}"


@dataclass(frozen=True)
class Charge:
    """An amount on the three dimensions: a reservation, or what a call really used."""

    model_requests: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0

    def values(self) -> tuple[float, float, float]:
        return (self.model_requests, self.total_tokens, self.cost_usd)


@dataclass(frozen=True)
class Refusal:
    """Why a reservation was refused: the first scope and limit it would have passed."""

    scope: str
    limit: str
    value: float

    def message(self) -> str:
        value = f"{self.value:g}" if self.limit == "cost_usd" else str(int(self.value))
        return f"limits: tree of run {self.scope} reached {self.limit} {value}"


class BudgetLedger(Protocol):
    """Totals per scope: used and reserved, on each dimension. Safe for concurrent callers."""

    async def reserve(self, scopes: Sequence[BudgetScope], charge: Charge) -> Refusal | None:
        """Add ``charge`` to the reserved totals of every scope, or to none: atomically, the
        charge is refused (``Refusal``) when used + reserved + charge would pass any limit of any
        scope. Never raises for a refusal; a store failure raises ``StoreError``."""
        ...

    async def settle(self, scopes: Sequence[BudgetScope], reserved: Charge, actual: Charge) -> None:
        """Take ``reserved`` back from every scope's reserved totals and add ``actual`` to its used
        totals, atomically. ``actual`` may exceed ``reserved`` (the estimate was low): the used
        total may then pass a limit, and the next reservation is refused."""
        ...

    async def spent(self, scope: str) -> tuple[Charge, Charge]:
        """(used, reserved) of ``scope`` (zero when the ledger never saw it)."""
        ...


@dataclass
class Budget:
    """What the engine gives each agent: the ledger, the agent's own limits, and what it needs
    to estimate a call's upper bound (the dearest price of its provider chain and the provider's
    max output tokens)."""

    ledger: BudgetLedger
    limits: Limits | None = None
    price: PriceEntry | None = None
    max_output_tokens: int = 0
