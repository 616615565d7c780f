"""The vendors' batch APIs, behind :class:`~shelly_dist.models.batching.BatchAPI`: OpenAI's Batch
API (and servers that implement it) and Anthropic's Message Batches.

Grok is not here: xAI's Batch API takes OpenAI's JSONL upload and ``POST /v1/batches``, but its
status (``state.num_pending``…) and its paged ``/results`` are shapes of its own, so Shelly's
OpenAI-shaped submitter would poll an xAI batch forever (until its timeout, then call directly).
Gemini is excluded, as in Shelly.
"""

from __future__ import annotations

from typing import Any

from shelly_dist.models.batching import BatchAPI
from shelly_dist.providers.anthropic import AnthropicCompleter
from shelly_dist.providers.batches.anthropic import AnthropicBatches
from shelly_dist.providers.batches.openai import OpenAIBatches
from shelly_dist.providers.openai import OpenAICompleter

__all__ = ["AnthropicBatches", "OpenAIBatches", "batch_api"]


def batch_api(vendor: str, completer: Any) -> BatchAPI | None:
    """The ``vendor`` batch API of the provider ``completer`` talks to, or ``None`` when that
    completer does not write the requests the API takes."""
    if vendor == "openai" and isinstance(completer, OpenAICompleter):
        return OpenAIBatches(completer)
    if vendor == "anthropic" and isinstance(completer, AnthropicCompleter):
        return AnthropicBatches(completer)
    return None
