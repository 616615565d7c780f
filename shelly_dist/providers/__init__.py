"""Layer 3 — model providers: Anthropic, OpenAI (and every compatible server), Grok, Gemini, and
``scripted``, a deterministic model for tests and the offline demo.

Each provider module is public by path (``shelly_dist.providers.anthropic``) and turns the vendor's
wire format into :class:`~shelly_dist.chats.Message` and back. The engine builds them through
:func:`create_completer`.
"""

from shelly_dist.providers.anthropic import AnthropicCompleter
from shelly_dist.providers.factory import create_completer, provider_kinds, register_provider, with_fallback
from shelly_dist.providers.gemini import GeminiCompleter
from shelly_dist.providers.grok import GrokCompleter
from shelly_dist.providers.http import HTTPCompleter, aclose_http_client
from shelly_dist.providers.openai import OpenAICompleter
from shelly_dist.providers.scripted import FunctionCompleter, Request, ScriptedCompleter, ScriptedReply

__all__ = [
    "AnthropicCompleter",
    "FunctionCompleter",
    "GeminiCompleter",
    "GrokCompleter",
    "HTTPCompleter",
    "OpenAICompleter",
    "Request",
    "ScriptedCompleter",
    "ScriptedReply",
    "aclose_http_client",
    "create_completer",
    "provider_kinds",
    "register_provider",
    "with_fallback",
]
