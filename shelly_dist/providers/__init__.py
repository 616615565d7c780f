"""Layer 3 — model providers: Anthropic, OpenAI (and every compatible server), Grok, Gemini, and
``scripted``, a deterministic model for tests and the offline demo.

Each provider module is public by path (``shelly_dist.providers.anthropic``) and turns the vendor's
wire format into :class:`~shelly_dist.chats.Message` and back.
"""

from shelly_dist.providers.scripted import FunctionCompleter, Request, ScriptedCompleter, ScriptedReply

__all__ = ["FunctionCompleter", "Request", "ScriptedCompleter", "ScriptedReply"]
