"""Google Gemini ``generateContent`` (``POST /v1beta/models/{model}:generateContent``).

Shelly's mapping:

- the system prompt goes in ``systemInstruction``; role ``assistant`` is ``model``, tool results
  are ``user`` turns, and consecutive same-role turns are merged;
- a ``functionResponse`` must name its function: the name is found by scanning the earlier tool
  calls for the result's id, and a result with no matching call is an error;
- tool content that is not a JSON object is wrapped as ``{"result": "<content>"}``;
- tool schemas lose ``$schema`` and ``additionalProperties`` at every depth (Gemini rejects them);
- Gemini has no tool-call ids, so they are generated locally; a ``thoughtSignature`` returned with
  a function call is kept in ``ToolCall.metadata`` and sent back with it;
- usage: ``promptTokenCount`` *includes* ``cachedContentTokenCount``, so input is their
  difference and cache-read the cached count (each token counted once);
- tool-call arguments that are not a JSON object are sent back as ``{"_raw": text}``;
- an answer with no candidates is an error;
- streamed (``:streamGenerateContent?alt=sse``), each event is a whole answer holding the next
  parts (:class:`GeminiStream`): texts are joined, function calls kept as they come, the last
  finish reason and usage kept; the stream's end is the answer's.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from shelly_dist.chats import Document, Image, Message, Role, Text, ToolCall, ToolResult
from shelly_dist.models.classify import http_error
from shelly_dist.models.completer import ToolSpec
from shelly_dist.models.usage import Usage
from shelly_dist.providers.http import (
    HTTPCompleter,
    IncompleteStream,
    api_url,
    assistant_reply,
    call_arguments,
    event_json,
    system_text,
)

THOUGHT_SIGNATURE = "thoughtSignature"
_DROPPED_KEYS = frozenset({"$schema", "additionalProperties"})


def clean_schema(schema: Any) -> Any:
    """``schema`` without ``$schema`` and ``additionalProperties``, recursively."""
    if isinstance(schema, dict):
        return {k: clean_schema(v) for k, v in schema.items() if k not in _DROPPED_KEYS}
    if isinstance(schema, list):
        return [clean_schema(v) for v in schema]
    return schema


def _response_payload(content: str) -> dict[str, Any]:
    try:
        value = json.loads(content)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"result": content}


class GeminiStream:
    """A streamed ``generateContent`` answer put back together (see the module docstring)."""

    def __init__(self, *, provider: str = "gemini", model: str = "") -> None:
        self.provider, self.model = provider, model
        self.parts: list[dict[str, Any]] = []
        self.finish: str | None = None
        self.usage: dict[str, Any] = {}
        self.chunks = 0

    def feed(self, name: str, data: str) -> str:
        chunk = event_json(data)
        if chunk.get("error"):
            status = int((chunk["error"] or {}).get("code") or 500)
            raise http_error(provider=self.provider, model=self.model, status=status, body=data)
        self.chunks += 1
        self.usage = chunk.get("usageMetadata") or self.usage
        candidates = chunk.get("candidates") or []
        if not candidates:
            return ""
        self.finish = candidates[0].get("finishReason") or self.finish
        text = []
        for part in (candidates[0].get("content") or {}).get("parts") or []:
            last = self.parts[-1] if self.parts else None
            if "text" in part and not part.get("thought") and last is not None and set(last) == {"text"}:
                last["text"] += part["text"]
            else:
                self.parts.append(dict(part))
            if "text" in part and not part.get("thought"):
                text.append(str(part["text"]))
        return "".join(text)

    def answer(self) -> dict[str, Any]:
        if self.finish is None:
            raise IncompleteStream(f"the stream ended after {self.chunks} chunks, before a finish reason")
        candidate = {"content": {"role": "model", "parts": self.parts}, "finishReason": self.finish}
        return {"candidates": [candidate], "usageMetadata": self.usage}


class GeminiCompleter(HTTPCompleter):
    """Gemini over the Generative Language API."""

    kind: ClassVar[str] = "gemini"
    default_base_url: ClassVar[str] = "https://generativelanguage.googleapis.com"
    api_version: ClassVar[str] = "v1beta"
    auth_header: ClassVar[str] = "x-goog-api-key"
    auth_scheme: ClassVar[str] = ""
    default_max_tokens: ClassVar[int] = 8192
    assembler = GeminiStream

    def endpoint(self) -> str:
        return f"/models/{self.model}:generateContent"

    def stream_request(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        url = api_url(self.base_url, self.api_version, f"/models/{self.model}:streamGenerateContent?alt=sse")
        return url, body

    def _part(self, part: Any, names: dict[str, str]) -> dict[str, Any] | None:
        if isinstance(part, Text):
            return {"text": part.text}
        if isinstance(part, Image | Document):
            if part.data:
                default = "image/png" if isinstance(part, Image) else "application/pdf"
                return {"inlineData": {"mimeType": part.media_type or default, "data": part.data}}
            return {"fileData": {"mimeType": part.media_type, "fileUri": getattr(part, "url", "")}}
        if isinstance(part, ToolCall):
            names[part.id] = part.name
            out: dict[str, Any] = {"functionCall": {"name": part.name, "args": call_arguments(part)}}
            if part.metadata.get(THOUGHT_SIGNATURE):
                out[THOUGHT_SIGNATURE] = part.metadata[THOUGHT_SIGNATURE]
            return out
        if isinstance(part, ToolResult):
            name = names.get(part.tool_call_id)
            if not name:
                raise self.error(f"no tool call found for tool result {part.tool_call_id!r}")
            return {"functionResponse": {"name": name, "response": _response_payload(part.content)}}
        return None

    def encode(self, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        body: dict[str, Any] = {}
        system = system_text(messages)
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        names: dict[str, str] = {}
        contents: list[dict[str, Any]] = []
        for m in messages:
            if m.role == Role.SYSTEM:
                continue
            role = "model" if m.role == Role.ASSISTANT else "user"
            parts = [p for p in (self._part(x, names) for x in m.parts) if p is not None]
            if not parts:
                continue
            if contents and contents[-1]["role"] == role:
                contents[-1]["parts"].extend(parts)
            else:
                contents.append({"role": role, "parts": parts})
        body["contents"] = contents
        if tools:
            body["tools"] = [
                {
                    "functionDeclarations": [
                        {
                            "name": t.name,
                            "description": t.description,
                            "parameters": clean_schema(t.input_schema or {"type": "object"}),
                        }
                        for t in tools
                    ]
                }
            ]
        config: dict[str, Any] = {"maxOutputTokens": self.max_tokens}
        if self.temperature:
            config["temperature"] = self.temperature
        body["generationConfig"] = config
        return body

    def decode(self, data: Any) -> tuple[Message, Usage]:
        candidates = data.get("candidates") or []
        if not candidates:
            raise self.error("empty candidates in response")
        parts: list[Any] = []
        for p in (candidates[0].get("content") or {}).get("parts") or []:
            if "functionCall" in p:
                fc = p["functionCall"]
                meta = {THOUGHT_SIGNATURE: p[THOUGHT_SIGNATURE]} if p.get(THOUGHT_SIGNATURE) else {}
                parts.append(
                    ToolCall(
                        id="",  # Gemini sends no ids: assistant_reply gives each call its own
                        name=fc["name"],
                        arguments=json.dumps(fc.get("args") or {}),
                        metadata=meta,
                    )
                )
            elif "text" in p and not p.get("thought"):
                parts.append(Text(text=p["text"]))
        reply = assistant_reply(parts, candidates[0].get("finishReason"))
        u = data.get("usageMetadata") or {}
        cached = int(u.get("cachedContentTokenCount") or 0)
        usage = Usage(
            # promptTokenCount already counts the cached ones: each token is counted once
            input_tokens=max(0, int(u.get("promptTokenCount") or 0) - cached),
            output_tokens=int(u.get("candidatesTokenCount") or 0),
            cache_read_tokens=cached,
        )
        return reply, usage
