"""xAI Grok: the OpenAI chat-completions format at ``https://api.x.ai`` (Shelly's ``grok`` kind)."""

from __future__ import annotations

from typing import ClassVar

from shelly_dist.providers.openai import OpenAICompleter


class GrokCompleter(OpenAICompleter):
    """Grok over xAI's OpenAI-compatible API; an answer without choices is "empty response"."""

    kind: ClassVar[str] = "grok"
    default_base_url: ClassVar[str] = "https://api.x.ai"
    empty_error: ClassVar[str] = "empty response"
    takes: ClassVar[frozenset[str]] = frozenset({"image"})  # xAI's chat completions read images, no files
