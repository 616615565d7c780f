"""Retry: call a completer again after a transient failure, waiting per :class:`Backoff`.

Rate-limit, overloaded, server, timeout and network errors are retried up to ``max_retries``
times; every other error (auth, billing, bad request, context overflow, anything that is not a
model error) is raised at once. Cancellation is never caught: ``asyncio.CancelledError`` is not
an ``Exception``, so a cancelled call — or a cancelled wait between attempts — ends immediately.
No lock is held while waiting or calling, so concurrent callers retry independently.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from shelly_dist.chats import Chat, Message
from shelly_dist.errors import ModelError
from shelly_dist.events import PROVIDER_RETRY, Event, EventSink, discard
from shelly_dist.identity import agent_name, run_id, session_id
from shelly_dist.models.backoff import Backoff
from shelly_dist.models.classify import error_kind, is_transient
from shelly_dist.models.completer import Completer, ToolSpec
from shelly_dist.models.usage import UsageTracker

logger = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]


def provider_event(kind: str, data: dict[str, object]) -> Event:
    """An event stamped with the identity of the agent making the call."""
    return Event(kind=kind, agent=agent_name(), run_id=run_id(), session_id=session_id(), data=data)


class RetryingCompleter:
    """Wraps ``inner`` and retries its transient failures; emits ``provider_retry`` per retry."""

    def __init__(
        self,
        inner: Completer,
        *,
        provider: str,
        max_retries: int = 3,
        backoff: Backoff | None = None,
        sleep: Sleep = asyncio.sleep,
        on_event: EventSink = discard,
    ) -> None:
        self.inner = inner
        self.provider = provider
        self.max_retries = max_retries
        self.backoff = backoff or Backoff()
        self._sleep = sleep
        self._on_event = on_event

    @property
    def usage(self) -> UsageTracker | None:
        """The wrapped provider's usage totals."""
        return getattr(self.inner, "usage", None)

    async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
        attempt = 0
        while True:
            try:
                return await self.inner.complete(chat, tools)
            except ModelError as exc:
                if not is_transient(exc) or attempt >= self.max_retries:
                    raise
                retry_after = getattr(exc, "retry_after", None)
                # A 429 the governor paused the key for: the next attempt waits its turn there (in
                # this process when near, else its run suspends), not in a sleep holding the slot.
                delay = 0.0 if getattr(exc, "paused", False) and retry_after is not None else self.backoff.delay(
                    attempt, retry_after)
                attempt += 1
                logger.warning(
                    "provider %s: %s, retry %d/%d in %.2fs",
                    self.provider,
                    error_kind(exc),
                    attempt,
                    self.max_retries,
                    delay,
                )
                self._on_event(
                    provider_event(
                        PROVIDER_RETRY,
                        {
                            "provider": self.provider,
                            "attempt": attempt,
                            "max_retries": self.max_retries,
                            "delay": delay,
                            "error_kind": error_kind(exc),
                            "status_code": getattr(exc, "status_code", None),
                            "error": str(exc),
                        },
                    )
                )
                await self._sleep(delay)
