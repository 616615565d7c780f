"""The completer every model call of a bounded run goes through: reserve, call, settle.

The run wraps its agent's completer in a :class:`LimitedCompleter` when it carries any scope, and
hands the same wrapper to its effects, so a compaction's summary call is reserved like any other.
The reservation is an upper bound: one request, the estimated input of the request (Shelly's
``TokenEstimator``) plus the provider's max output tokens, and that many tokens at the dearest
price of the agent's provider chain. The settlement is what the provider reported.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from shelly_dist.agent.limits.base import Budget, BudgetScope, Charge
from shelly_dist.chats import Chat, Message
from shelly_dist.errors import LimitExceeded
from shelly_dist.models import Completer, ToolSpec, Usage
from shelly_dist.models.context import estimate_tokens
from shelly_dist.models.suspend import SuspendModel

logger = logging.getLogger(__name__)


class LimitedCompleter:
    """Reserves against ``scopes`` before each call of ``inner`` and settles after it."""

    def __init__(self, inner: Completer, budget: Budget, scopes: Sequence[BudgetScope], *, agent: str = "") -> None:
        self.inner = inner
        self.budget = budget
        self.scopes = list(scopes)
        self.agent = agent

    @property
    def usage(self) -> object:
        return getattr(self.inner, "usage", None)

    def estimate(self, chat: Chat, tools: Sequence[ToolSpec]) -> Charge:
        """The upper bound reserved for one call with ``chat`` and ``tools``."""
        out = self.budget.max_output_tokens
        tokens = estimate_tokens(chat.view(), tools) + out
        price = self.budget.price
        cost = price.upper_bound(tokens - out, out) if price is not None else 0.0
        return Charge(model_requests=1, total_tokens=tokens, cost_usd=cost)

    async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
        """The reply of ``inner``; raises ``LimitExceeded`` (nothing sent) when a scope refuses."""
        ledger = self.budget.ledger
        charge = self.estimate(chat, tools)
        refusal = await ledger.reserve(self.scopes, charge)
        if refusal is not None:
            raise LimitExceeded(refusal.message(), agent=self.agent, limit=refusal.limit, scope=refusal.scope)
        try:
            reply = await self.inner.complete(chat, tools)
        except SuspendModel:  # nothing was sent: the reservation is given back whole
            await asyncio.shield(ledger.settle(self.scopes, charge, Charge()))
            raise
        except BaseException:
            # The request may have reached the provider: it counts, its tokens are unknown (0).
            try:
                await asyncio.shield(ledger.settle(self.scopes, charge, Charge(model_requests=1)))
            except Exception as exc:  # the call's own error matters more than the ledger's
                logger.warning("limits: could not settle a failed call of %s: %s", self.agent, exc)
            raise
        usage = Usage.of(reply)
        await ledger.settle(self.scopes, charge, Charge(1, usage.total_tokens, usage.cost_usd))
        return reply

    async def record_delivered(self, usage: Usage) -> None:
        """Charge a model call whose reply was delivered after a suspension (a vendor batch): it
        reserved nothing (its reservation was given back when it suspended), so its real usage is
        added now; the next reservation is refused if it passed a limit."""
        await self.budget.ledger.settle(self.scopes, Charge(), Charge(1, usage.total_tokens, usage.cost_usd))
