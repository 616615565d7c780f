"""Fallback: when a provider fails for good, try the next one — skipping those cooling down.

A chain is an ordered list of candidates. Each is normally already a retrying completer, so a
candidate's failure reaching the chain means its retries are spent. After a transient or billing
failure the candidate's cooldown ladder climbs (see :mod:`~shelly_dist.models.cooldown`), a
``provider_fallback`` event is emitted, and the next candidate is tried; any other error (auth,
bad request, context overflow) goes straight to the caller, because another provider would only
fail the same way or hide a configuration mistake. Cancellation is never caught. A success resets
the candidate's cooldown.

Candidates in cooldown are skipped. When *every* candidate is cooling down, the one whose
cooldown ends first is tried anyway: refusing to call at all would turn a cooldown into an outage.

The same chain, with ``rotate=True``, spreads calls round-robin over the API keys of one provider
(each key its own candidate with its own cooldown). There a key whose governor would suspend the
call (its account has no room for a while) is passed over for the next; when every key would, the
call suspends until the soonest. A 429 the governor paused a key for does not climb that key's
cooldown ladder: the pause, which every process honours, is its cooldown.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from shelly_dist.chats import Chat, Message
from shelly_dist.errors import ModelError, UsageError
from shelly_dist.events import PROVIDER_FALLBACK, EventSink, discard
from shelly_dist.models.classify import BILLING, error_kind, should_fall_back
from shelly_dist.models.completer import Completer, ToolSpec
from shelly_dist.models.cooldown import CooldownStore
from shelly_dist.models.retry import provider_event
from shelly_dist.models.suspend import SuspendModel, calling_model, model_call
from shelly_dist.models.usage import Usage, UsageTracker

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Candidate:
    """One link of a chain: a display name, its completer, and the key its cooldown is kept under."""

    name: str
    completer: Completer
    cooldown_key: str = ""

    @property
    def key(self) -> str:
        return self.cooldown_key or self.name


class FallbackCompleter:
    """Tries ``candidates`` in order (or round-robin with ``rotate``) until one answers."""

    def __init__(
        self,
        candidates: Sequence[Candidate | tuple[str, Completer]],
        *,
        cooldowns: CooldownStore,
        on_event: EventSink = discard,
        clock: Callable[[], float] = time.time,
        rotate: bool = False,
        provider: str = "",
        usage: UsageTracker | None = None,
    ) -> None:
        if not candidates:
            raise UsageError("fallback: at least one candidate is needed")
        self.candidates = [c if isinstance(c, Candidate) else Candidate(*c) for c in candidates]
        self.provider = provider or self.candidates[0].name
        self.cooldowns = cooldowns
        self.usage = usage or UsageTracker()
        self._on_event = on_event
        self._clock = clock
        self._rotate = rotate
        self._turn = itertools.count()

    def _order(self) -> list[Candidate]:
        if not self._rotate:
            return list(self.candidates)
        start = next(self._turn) % len(self.candidates)
        return self.candidates[start:] + self.candidates[:start]

    async def _plan(self) -> list[tuple[Candidate, float]]:
        order = self._order()
        untils = await asyncio.gather(*(self.cooldowns.cooling_until(c.key) for c in order))
        now = self._clock()
        ready = [(c, u) for c, u in zip(order, untils, strict=True) if u <= now]
        if ready:
            return ready
        soonest = min(zip(order, untils, strict=True), key=lambda cu: cu[1])
        logger.warning(
            "fallback %s: every candidate is cooling down, trying %s", self.provider, soonest[0].name
        )
        return [soonest]

    async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
        plan = await self._plan()
        suspended: list[SuspendModel] = []
        for i, (cand, until) in enumerate(plan):
            try:
                if self._rotate and i + 1 < len(plan):  # a key that would make the call wait is passed over
                    with calling_model(replace(model_call(), can_suspend=True)):
                        reply = await cand.completer.complete(chat, tools)
                else:
                    reply = await cand.completer.complete(chat, tools)
            except SuspendModel as signal:  # this key must wait: another may not
                if not self._rotate:
                    raise
                suspended.append(signal)
                if i + 1 == len(plan):  # every key must wait (the caller can suspend): the soonest
                    raise min(suspended, key=lambda s: s.due_at or float("inf")) from None
                continue
            except ModelError as exc:
                if not should_fall_back(exc):
                    raise
                kind = error_kind(exc)
                if not getattr(exc, "paused", False):  # a governor's pause is the key's cooldown
                    await self.cooldowns.record_failure(cand.key, billing=kind == BILLING, now=self._clock())
                if i + 1 == len(plan):
                    raise
                nxt = plan[i + 1][0].name
                logger.warning("provider %s failed (%s), falling back to %s", cand.name, kind, nxt)
                self._on_event(
                    provider_event(
                        PROVIDER_FALLBACK,
                        {
                            "provider": self.provider,
                            "from": cand.name,
                            "to": nxt,
                            "error_kind": kind,
                            "error": str(exc),
                        },
                    )
                )
                continue
            if until:
                await self.cooldowns.reset(cand.key)
            if self.usage is not getattr(cand.completer, "usage", None):
                self.usage.add(Usage.of(reply))
            return reply
        raise AssertionError("unreachable: the plan is never empty")


def with_fallback(
    primary: tuple[str, Completer],
    candidates: Sequence[tuple[str, Completer]],
    *,
    cooldowns: CooldownStore,
    on_event: EventSink = discard,
    clock: Callable[[], float] = time.time,
) -> FallbackCompleter:
    """The chain ``primary`` then ``candidates`` (a provider's ``fallback: [...]``), by provider name."""
    return FallbackCompleter([primary, *candidates], cooldowns=cooldowns, on_event=on_event, clock=clock)
