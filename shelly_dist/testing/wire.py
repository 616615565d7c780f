"""The vendors' wire formats as the stand-in servers speak them: a scripted :class:`Reply`, a
:class:`RecordedRequest`, and each vendor's answer and error JSON. Both the model server
(:mod:`shelly_dist.testing.model_server`) and its batch APIs (:mod:`shelly_dist.testing.batch_api`)
build on this module, which imports neither.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

FORMATS = ("openai", "anthropic", "gemini")

PROBE_PATHS = frozenset({"/api/show", "/tokenize"})
"""What clients ask a local server besides model calls (Ollama's model info, llama.cpp's and vLLM's
tokenizer): never a model call, whatever ``format`` says; recorded in ``probes``."""

_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}


@dataclass
class Reply:
    """One scripted answer. A ``status`` other than 200 makes it an error answer."""

    text: str = "ok"
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    status: int = 200
    body: str | None = None
    retry_after: str | None = None
    malformed: bool = False
    raw: dict[str, Any] | None = None
    delay: float = 0.0
    hold_until: int = 0
    release: threading.Event | None = None
    """Hold the answer until the test sets this event (or the server stops): a model call that
    lasts exactly as long as the test wants, without timing."""
    finish_reason: str | None = None
    """``length`` makes the answer one the output limit cut (Anthropic ``max_tokens``, Gemini
    ``MAX_TOKENS``); default: ``tool_calls``/``stop`` as the reply says."""
    stream_gate: threading.Event | None = None
    """Streamed: after the first piece of text, wait (at most 60 s) until the test sets it."""
    stream_cut: bool = False
    """Streamed: close the connection after the first piece of text (a dropped stream)."""
    batch_state: str | None = None
    """As a line of a provider batch: ``errored`` or ``expired`` makes that line fail so (default:
    ``succeeded``, or ``errored`` for an error ``status``)."""

    @classmethod
    def error(cls, status: int, body: str | None = None, *, retry_after: str | None = None) -> Reply:
        """An error answer; ``body`` defaults to the vendor's error JSON for ``status``."""
        return cls(text="", status=status, body=body, retry_after=retry_after)

    def _usage(self, key: str, default: int) -> int:
        return int(self.usage.get(key, default))


@dataclass
class RecordedRequest:
    """What the server received. ``arrived``/``answered`` are ``time.monotonic()`` values."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    arrived: float
    answered: float = 0.0
    client_port: int = 0
    """The TCP port the request came from: which client process sent it (its connections), when
    handling may lag behind the sending (a loaded machine)."""


def speaker(request: RecordedRequest) -> str:
    """The instance name a request's prompt gives its agent (``<identity>`` "You are NAME."), or "".

    Where it is depends on the provider: in the system prompt (Anthropic, Gemini, a one-part
    prompt), or at the head of the first user turn (OpenAI-compatible servers get the instance's
    own part there, see :mod:`shelly_dist.providers.openai`). Tests route replies by it.
    """
    body = request.body if isinstance(request.body, dict) else {}
    text = json.dumps([body.get("system"), body.get("systemInstruction"), (body.get("messages") or [])[:2],
                       (body.get("contents") or [])[:1]], ensure_ascii=False)
    marker = "<identity>\\nYou are "  # as JSON writes the newline
    return text.split(marker, 1)[1].split(".", 1)[0] if marker in text else ""


def format_of(path: str, fallback: str | None) -> str | None:
    if path.endswith("/chat/completions"):
        return "openai"
    if path.endswith("/messages"):
        return "anthropic"
    if ":generateContent" in path or ":streamGenerateContent" in path:
        return "gemini"
    return fallback


def streamed(path: str, body: Any) -> bool:
    """Whether the request asks for the answer as a stream."""
    return ":streamGenerateContent" in path or (isinstance(body, dict) and body.get("stream") is True)


def _arguments_text(arguments: Any) -> str:
    """Arguments given as a string are sent as is (a cut ``"{"`` included), others as JSON."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _openai(reply: Reply, model: str, prompt: tuple[int, int] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": c.get("id") or f"call_{i}",
                "type": "function",
                "function": {"name": c["name"], "arguments": _arguments_text(c.get("arguments", {}))},
            }
            for i, c in enumerate(reply.tool_calls)
        ]
    inp, out = reply._usage("input", 10), reply._usage("output", 5)
    cached = reply._usage("cache_read", 0)
    if prompt is not None and "input" not in reply.usage:
        inp, cached = prompt
    finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    return {
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish}
        ],
        "usage": {  # as OpenAI, vLLM and llama.cpp: prompt_tokens includes the cached ones
            "prompt_tokens": inp,
            "completion_tokens": out,
            "total_tokens": inp + out,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }


def _anthropic(reply: Reply, model: str, prompt: tuple[int, int] | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    content += [
        {
            "type": "tool_use",
            "id": c.get("id") or f"toolu_{i}",
            "name": c["name"],
            "input": c.get("arguments", {}),
        }
        for i, c in enumerate(reply.tool_calls)
    ]
    return {
        "id": "msg_mock",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "max_tokens" if reply.finish_reason == "length" else (
            "tool_use" if reply.tool_calls else "end_turn"),
        "usage": {
            "input_tokens": reply._usage("input", 10),
            "output_tokens": reply._usage("output", 5),
            "cache_creation_input_tokens": reply._usage("cache_creation", 0),
            "cache_read_input_tokens": reply._usage("cache_read", 0),
        },
    }


def _gemini(reply: Reply, model: str, prompt: tuple[int, int] | None = None) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"text": reply.text}] if reply.text else []
    for c in reply.tool_calls:
        part: dict[str, Any] = {"functionCall": {"name": c["name"], "args": c.get("arguments", {})}}
        if c.get("thought_signature"):
            part["thoughtSignature"] = c["thought_signature"]
        parts.append(part)
    inp, out = reply._usage("input", 10), reply._usage("output", 5)
    return {
        "candidates": [{"content": {"role": "model", "parts": parts},
                        "finishReason": "MAX_TOKENS" if reply.finish_reason == "length" else "STOP"}],
        "usageMetadata": {  # promptTokenCount includes cachedContentTokenCount, as Gemini's
            "promptTokenCount": inp,
            "candidatesTokenCount": out,
            "totalTokenCount": inp + out,
            "cachedContentTokenCount": reply._usage("cache_read", 0),
        },
        "modelVersion": model,
    }


ANSWERS = {"openai": _openai, "anthropic": _anthropic, "gemini": _gemini}


def answer_body(fmt: str, reply: Reply, model: str) -> dict[str, Any]:
    """The vendor's JSON answer to a request for ``model`` (``reply.raw`` when set)."""
    return reply.raw if reply.raw is not None else ANSWERS[fmt](reply, model)


def error_body(fmt: str, status: int) -> dict[str, Any]:
    """The vendor's error JSON for ``status``."""
    message = f"mock error {status}"
    if fmt == "anthropic":
        return {
            "type": "error",
            "error": {"type": _ANTHROPIC_ERRORS.get(status, "api_error"), "message": message},
        }
    if fmt == "gemini":
        return {
            "error": {
                "code": status,
                "message": message,
                "status": "UNAVAILABLE" if status >= 500 else "ERROR",
            }
        }
    return {
        "error": {
            "message": message,
            "type": "rate_limit_exceeded" if status == 429 else "error",
            "code": status,
        }
    }
