"""The completer wrapper that reports each model call: to the worker's metrics, and as a
``chat <model>`` span.

It sits outside the pricing wrapper, so the cost it records is the one the call was priced at,
and outside the retries, so a call's latency is what the run waited (its retries included).
"""

from __future__ import annotations

from typing import Any

from shelly_dist.chats import Chat, Message
from shelly_dist.models.completer import Completer, ToolSpec
from shelly_dist.models.speed import SPEED
from shelly_dist.models.usage import Usage
from shelly_dist.observability import metrics, tracing


class ObservedCompleter:
    """Records the latency, tokens and cost of every call of ``inner`` under ``provider``/``model``
    (the provider's config name and its model: bounded labels)."""

    def __init__(self, inner: Completer, *, provider: str, model: str, kind: str = "") -> None:
        self.inner = inner
        self.provider = provider
        self.model = model
        self.kind = kind or provider
        """The provider's kind (``openai``…): ``gen_ai.provider.name`` on the span."""

    @property
    def usage(self) -> Any:
        """The wrapped completer's usage total (fallback chains compare it by identity)."""
        return getattr(self.inner, "usage", None)

    async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
        with tracing.chat(self.kind, self.model, provider=self.provider) as span, \
                metrics.model_call(self.provider, self.model):
            reply = await self.inner.complete(chat, tools)
            usage = Usage.of(reply)
            tracing.record_reply(span, input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                                 cost_usd=usage.cost_usd, finish_reason=str(reply.metadata.get("stop_reason") or ""),
                                 text=reply.text_content())
        metrics.model_usage(self.provider, self.model, {
            "input": usage.input_tokens, "output": usage.output_tokens,
            "cache_read": usage.cache_read_tokens, "cache_creation": usage.cache_creation_tokens,
        }, usage.cost_usd)
        speed = reply.metadata.get(SPEED)
        if isinstance(speed, dict) and isinstance(speed.get("tokens_per_second"), int | float):
            metrics.model_speed(self.provider, self.model, float(speed["tokens_per_second"]))
        return reply
