"""The loopback model server's streamed answers: a vendor's whole answer cut into the events its
real API streams (``text/event-stream``), so the providers' stream readers are tested against the
wire format, not against themselves.

Each function takes the answer :mod:`shelly_dist.testing.model_server` would have sent unstreamed
and returns its events as ``(event name or "", JSON payload)``: text in word-sized pieces, tool-call
arguments in a few pieces, the finish and the usage last, as the vendors send them.
"""

from __future__ import annotations

import json
import re
from typing import Any

Event = tuple[str, Any]


def pieces(text: str) -> list[str]:
    """``text`` cut after each word (its following whitespace kept with it)."""
    return re.findall(r"\s*\S+\s*", text) or ([text] if text else [])


def _halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [p for p in (text[:middle], text[middle:]) if p]


def openai_events(answer: dict[str, Any]) -> list[Event]:
    """Chat-completion chunks (``delta``s), the usage chunk (``stream_options.include_usage``), and
    ``[DONE]``."""
    choice = answer["choices"][0]
    message = choice["message"]
    base = {"id": answer.get("id", "chatcmpl-mock"), "object": "chat.completion.chunk", "model": answer.get("model")}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> Event:
        return "", {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": p}) for p in pieces(message.get("content") or "")]
    for i, call in enumerate(message.get("tool_calls") or []):
        fn = call["function"]
        out.append(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                          "function": {"name": fn["name"], "arguments": ""}}]}))
        out += [chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]}) for p in _halves(fn["arguments"])]
    out.append(chunk({}, choice["finish_reason"]))
    out.append(("", {**base, "choices": [], "usage": answer["usage"]}))
    out.append(("", "[DONE]"))
    return out


def anthropic_events(answer: dict[str, Any]) -> list[Event]:
    """``message_start``, each block's start, deltas and stop, ``message_delta``, ``message_stop``."""
    usage = dict(answer["usage"])
    output = usage.pop("output_tokens", 0)
    start = {k: v for k, v in answer.items() if k not in ("content", "stop_reason", "usage")}
    out: list[Event] = [("message_start", {"type": "message_start", "message": {
        **start, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}})]
    for index, block in enumerate(answer["content"]):
        if block["type"] == "text":
            out.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": {"type": "text", "text": ""}}))
            out += [("content_block_delta", {"type": "content_block_delta", "index": index,
                                             "delta": {"type": "text_delta", "text": p}})
                    for p in pieces(block["text"])]
        else:
            out.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": {
                "type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}))
            out += [("content_block_delta", {"type": "content_block_delta", "index": index,
                                             "delta": {"type": "input_json_delta", "partial_json": p}})
                    for p in _halves(json.dumps(block["input"]))]
        out.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    out.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": answer["stop_reason"]},
                                  "usage": {"output_tokens": output}}))
    out.append(("message_stop", {"type": "message_stop"}))
    return out


def gemini_events(answer: dict[str, Any]) -> list[Event]:
    """Whole ``generateContent`` answers, each with the next parts; the finish and usage last."""
    candidate = answer["candidates"][0]
    parts: list[dict[str, Any]] = []
    for part in candidate["content"]["parts"]:
        parts += [{"text": p} for p in pieces(part["text"])] if "text" in part else [part]
    out: list[Event] = [("", {"candidates": [{"content": {"role": "model", "parts": [p]}}]}) for p in parts]
    last = {"candidates": [{"content": {"role": "model", "parts": []}, "finishReason": candidate["finishReason"]}],
            "usageMetadata": answer["usageMetadata"], "modelVersion": answer.get("modelVersion")}
    return [*out, ("", last)]


def frame(event: Event) -> bytes:
    """One event as its ``text/event-stream`` bytes."""
    name, payload = event
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return (f"event: {name}\n" if name else "").encode() + f"data: {data}\n\n".encode()


EVENTS = {"openai": openai_events, "anthropic": anthropic_events, "gemini": gemini_events}


def is_text(fmt: str, event: Event) -> bool:
    """Whether ``event`` carries a piece of the reply's text (where a held stream pauses)."""
    payload = event[1]
    if not isinstance(payload, dict):
        return False
    if fmt == "anthropic":
        return (payload.get("delta") or {}).get("type") == "text_delta"
    if fmt == "openai":
        return bool(((payload.get("choices") or [{}])[0].get("delta") or {}).get("content"))
    parts = ((payload.get("candidates") or [{}])[0].get("content") or {}).get("parts") or []
    return any("text" in p for p in parts)
