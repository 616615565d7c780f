"""What a model's reply may hold that must not be trusted as is: tool-call arguments that are not
a JSON object, and a reply the provider cut at its output limit.

Both come from real local servers: a small model (or any model cut by ``max_tokens``) emits a tool
call whose ``arguments`` are ``"{"``. Such a call is never executed — the model gets an error
result naming the arguments — and what is sent back to the server in the next request's history
is always a JSON object (:func:`wire_arguments`): llama-server answers every later request with
``500 Failed to parse tool call arguments as JSON`` otherwise, and the run is lost.
"""

from __future__ import annotations

import json
from typing import Any

from shelly_dist.chats.message import Message

STOP_REASON = "stop_reason"
"""The metadata key under which providers record the vendor's stop reason on a reply."""

TRUNCATED_STOP_REASONS = frozenset({"length", "max_tokens", "MAX_TOKENS", "model_length"})
"""Stop reasons that mean the output limit cut the reply: OpenAI-compatible ``length`` (vLLM
``model_length`` too), Anthropic ``max_tokens``, Gemini ``MAX_TOKENS``."""

RAW_KEY = "_raw"
"""The key holding arguments that were not a JSON object, when they are sent back to a server."""


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def parse_arguments(text: str) -> dict[str, Any] | None:
    """The arguments as a JSON object (``{}`` for empty text), or ``None`` when they are not one.

    ``NaN`` and ``Infinity``, which Python's parser takes and no JSON parser does, make them not
    one: sent back byte for byte, llama-server answered every later request with HTTP 500."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text, parse_constant=_not_json)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def argument_problem(name: str, text: str) -> str | None:
    """The error result a call with these arguments gets instead of running, or ``None`` when they
    are a JSON object."""
    if parse_arguments(text) is not None:
        return None
    shown = text if len(text) <= 200 else text[:200] + "…"
    return f"invalid arguments for {name}: not a JSON object: {shown!r}; call the tool again with a JSON object"


def arguments_object(text: str) -> dict[str, Any]:
    """The arguments as an object to send back to a server: parsed when valid, ``{}`` when empty,
    else ``{"_raw": text}`` (the server accepts it, and the model still sees what it wrote)."""
    value = parse_arguments(text)
    return value if value is not None else {RAW_KEY: text}


def wire_arguments(text: str) -> str:
    """The arguments as JSON text to send back: unchanged when already an object (byte for byte,
    so a server's prefix cache still matches), else :func:`arguments_object` encoded."""
    if text.strip() and parse_arguments(text) is not None:
        return text
    return json.dumps(arguments_object(text))


def truncated(reply: Message) -> bool:
    """Whether the provider said the output limit cut ``reply``."""
    return str(reply.metadata.get(STOP_REASON) or "") in TRUNCATED_STOP_REASONS
