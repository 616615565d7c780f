"""The completer wrapper that reports each model call to the worker's metrics.

It sits outside the pricing wrapper, so the cost it records is the one the call was priced at,
and outside the retries, so a call's latency is what the run waited (its retries included).
"""

from __future__ import annotations

from typing import Any

from shelly_dist.chats import Chat, Message
from shelly_dist.models.completer import Completer, ToolSpec
from shelly_dist.models.usage import Usage
from shelly_dist.observability import metrics


class ObservedCompleter:
    """Records the latency, tokens and cost of every call of ``inner`` under ``provider``/``model``
    (the provider's config name and its model: bounded labels)."""

    def __init__(self, inner: Completer, *, provider: str, model: str) -> None:
        self.inner = inner
        self.provider = provider
        self.model = model

    @property
    def usage(self) -> Any:
        """The wrapped completer's usage total (fallback chains compare it by identity)."""
        return getattr(self.inner, "usage", None)

    async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
        with metrics.model_call(self.provider, self.model):
            reply = await self.inner.complete(chat, tools)
        usage = Usage.of(reply)
        metrics.model_usage(self.provider, self.model, {
            "input": usage.input_tokens, "output": usage.output_tokens,
            "cache_read": usage.cache_read_tokens, "cache_creation": usage.cache_creation_tokens,
        }, usage.cost_usd)
        return reply
