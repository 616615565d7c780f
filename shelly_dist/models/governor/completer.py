"""The completer of one governed unit (an API key of a provider, for one model): reserve before the
call, settle after it, pause the key on a 429, learn the limits from the vendor's headers.

It sits on each key's vendor completer, under key rotation and retry (``providers/factory.py``),
so every attempt, on any key, is reserved again. The store is the deployment's: in memory
embedded, in Redis on a pool, where every process reserves from the same account.

A reservation the store cannot grant within :data:`~.base.BOUND` seconds suspends the run (its
model call is made again at its turn, :class:`~shelly_dist.models.suspend.SuspendModel`), holding
no worker slot meanwhile; a shorter wait, or any wait of a caller that cannot suspend (not a run's
model step), is waited here. The reservation keeps its id across the suspension (it is in the
wait's payload), so the run keeps its place in the key's queue.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping

from shelly_dist import identity
from shelly_dist.chats import Chat, Message
from shelly_dist.errors import ModelHTTPError
from shelly_dist.models.classify import OVERLOADED, RATE_LIMIT
from shelly_dist.models.completer import Completer, ToolSpec
from shelly_dist.models.governor.base import BOUND, Ask, GovernorStore, KeyLimits, Settle
from shelly_dist.models.governor.headers import hearing, learned_from
from shelly_dist.models.governor.spend import Reserved, Spending
from shelly_dist.models.ratelimit import estimate_tokens
from shelly_dist.models.suspend import SuspendModel, model_call
from shelly_dist.models.usage import Usage, UsageTracker
from shelly_dist.observability import metrics

logger = logging.getLogger(__name__)

GOVERNOR = "governor"
"""The ``kind`` of a model call suspended by the governor."""

EARLY = BOUND * 0.75
"""Seconds before its turn a suspended run is due: it comes back through the reapers and the
broker (late by up to a reap interval), then waits the rest of its turn here — on time, so the
key's pace loses nothing to the trip."""


class GovernedCompleter:
    """Wraps one key's vendor completer: every call is reserved in ``store`` under ``unit``."""

    def __init__(
        self,
        inner: Completer,
        *,
        store: GovernorStore,
        unit: str,
        provider: str,
        model: str,
        limits: KeyLimits,
        timeout: float | None = None,
        spend: Spending | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.inner = inner
        self.store = store
        self.unit = unit
        self.provider = provider
        self.model = model
        self.limits = limits
        self.timeout = timeout or 600.0
        self.spend = spend
        """The key's and the labels' ``spend:`` limits, with the ledger and the model's price."""
        self._clock = clock
        self._sleep = sleep

    @property
    def usage(self) -> UsageTracker | None:
        return getattr(self.inner, "usage", None)

    def _ask(self, chat: Chat, tools: list[ToolSpec]) -> Ask:
        call = model_call()
        previous = call.previous
        rid = ""
        if previous is not None and previous.kind == GOVERNOR and previous.payload.get("unit") == self.unit:
            rid = str(previous.payload.get("reservation") or "")
        run = identity.run_id()
        return Ask(unit=self.unit, id=rid or f"{run or 'call'}:{uuid.uuid4().hex[:10]}",
                   tokens=estimate_tokens(list(chat.view()), tools), priority=identity.priority(),
                   share=identity.share() or run, limits=self.limits, timeout=self.timeout)

    async def _granted(self, ask: Ask) -> None:
        """Wait for the grant here while it is near; suspend the run when it is not (and it can)."""
        started = self._clock()
        can_suspend = model_call().can_suspend
        while True:
            decision = await self.store.reserve(ask, self._clock())
            if decision.granted:
                metrics.governor_granted(self.provider, self.model, ask.priority, self._clock() - started)
                return
            if decision.wait > BOUND and can_suspend:
                metrics.governor_suspended(self.provider, self.model, decision.reason)
                due = self._clock() + max(0.0, decision.wait - EARLY)
                raise SuspendModel(GOVERNOR, {"unit": self.unit, "reservation": ask.id, "limit": decision.reason},
                                   due, reason=f"the {self.provider} key: {decision.reason}")
            await self._sleep(max(0.01, decision.wait))

    async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
        ask = self._ask(chat, tools)
        spent = await self._spend(ask)
        try:
            await self._granted(ask)
        except BaseException:
            if spent is not None:
                await asyncio.shield(spent.settle(0.0))
            raise
        headers: dict[str, str] = {}
        started = self._clock()
        try:
            with hearing(headers.update):
                reply = await self.inner.complete(chat, tools)
        except ModelHTTPError as exc:
            await self._rejected(exc, headers)
            await self._settle(ask, None, started, spent)
            raise
        except BaseException:
            await asyncio.shield(self._settle(ask, None, started, spent))
            raise
        usage = Usage.of(reply)
        await self._settle(ask, usage, started, spent)
        await self._heard(headers)
        return reply

    async def _spend(self, ask: Ask) -> Reserved | None:
        """Reserve the call's most possible cost in its ``spend:`` scopes, or refuse it."""
        if self.spend is None:
            return None
        return await self.spend.reserve(ask.tokens, identity.share(), self._clock(), provider=self.provider,
                                        model=self.model)

    async def _settle(self, ask: Ask, usage: Usage | None, started: float, spent: Reserved | None = None) -> None:
        if spent is not None:  # a failed call may still have been billed: its reservation stays spent
            await spent.settle(spent.amount if usage is None else spent.price_of(usage))
        real_in = None if usage is None else usage.input_tokens + usage.cache_creation_tokens + usage.cache_read_tokens
        await self.store.settle(Settle(unit=self.unit, id=ask.id, estimated=ask.tokens, input_tokens=real_in,
                                       output_tokens=usage.output_tokens if usage is not None else 0,
                                       priority=ask.priority, limits=self.limits,
                                       latency=self._clock() - started), self._clock())

    async def _heard(self, headers: Mapping[str, str]) -> None:
        if not headers:
            return
        learned = learned_from(headers, self._clock())
        if learned.limits.any() or learned.pause_until:
            await self.store.learn(self.unit, learned, self._clock())
            heard = learned.limits
            metrics.governor_learned(self.provider, self.model, {
                "rpm": heard.rpm, "input_tpm": heard.input_tpm, "output_tpm": heard.output_tpm})

    async def _rejected(self, exc: ModelHTTPError, headers: Mapping[str, str]) -> None:
        """A 429 (or an overload with a ``retry-after``) pauses the key for every process."""
        if exc.kind != RATE_LIMIT and not (exc.kind == OVERLOADED and exc.retry_after is not None):
            await self._heard(headers)
            return
        learned = learned_from(headers, self._clock(), rejected=True, retry_after=exc.retry_after)
        await self.store.learn(self.unit, learned, self._clock())
        exc.paused = True
        metrics.governor_rejected(self.provider, self.model, exc.status_code or 0)
        logger.warning("provider %s: HTTP %s, the key is paused for %.1fs for every process", self.provider,
                       exc.status_code, max(0.0, learned.pause_until - self._clock()))
