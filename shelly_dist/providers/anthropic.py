"""Anthropic Messages API (``POST /v1/messages``), mapped exactly as Shelly maps it.

- The system prompt (the chat's first system message) is sent as ``system: [{type: text, text,
  cache_control: {type: ephemeral}}]``; system-role messages never appear in ``messages``.
  The tools come before the system prompt in Anthropic's cache order, so the two breakpoints
  (last tool, system prompt) let siblings of one agent — same tools, same system prompt up to
  the end — read each other's cache. ``prompt_cache: false`` on the provider drops both.
- Tool-role messages become ``user`` messages of ``tool_result`` blocks, and consecutive messages
  of the same role are merged into one message with several blocks (the API requires
  alternation, and results of one turn belong together).
- ``is_error`` is sent on a ``tool_result`` only when true; ``tool_use.input`` defaults to ``{}``.
- The last tool carries ``cache_control: ephemeral`` so the tool list is cached with the prompt.
- Images and documents are base64 ``source`` blocks (an image with only a URL uses a URL source).
- ``temperature`` is omitted when unset or 0. Usage records input, output, cache-creation and
  cache-read tokens.
- Streamed (``stream: true``), the events are put back into the message they describe
  (:class:`AnthropicStream`): ``message_start`` (id, usage), each block's ``content_block_start``
  and deltas (``text_delta``; a tool's ``input_json_delta`` pieces, parsed once the block is whole),
  ``message_delta`` (stop reason, output tokens), ``message_stop``; an ``error`` event is the error
  answer the vendor would have sent (``overloaded_error`` as a 529), so it is retried the same.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from shelly_dist.chats import Document, Image, Message, Role, Text, ToolCall, ToolResult
from shelly_dist.models.classify import http_error
from shelly_dist.models.completer import ToolSpec
from shelly_dist.models.usage import Usage
from shelly_dist.providers.http import HTTPCompleter, IncompleteStream, assistant_reply, call_arguments, event_json

EPHEMERAL = {"type": "ephemeral"}


def _block(part: Any) -> dict[str, Any] | None:
    if isinstance(part, Text):
        return {"type": "text", "text": part.text}
    if isinstance(part, Image):
        if part.data:
            return {
                "type": "image",
                "source": {"type": "base64", "media_type": part.media_type or "image/png", "data": part.data},
            }
        return {"type": "image", "source": {"type": "url", "url": part.url}}
    if isinstance(part, Document):
        return {
            "type": "document",
            "source": {
                "type": "base64",
                "media_type": part.media_type or "application/pdf",
                "data": part.data,
            },
        }
    if isinstance(part, ToolCall):
        return {"type": "tool_use", "id": part.id, "name": part.name, "input": call_arguments(part)}
    if isinstance(part, ToolResult):
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": part.tool_call_id,
            "content": part.content,
        }
        if part.is_error:
            block["is_error"] = True
        return block
    return None


def encode_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Shelly's message mapping: no system messages, tool → user, same-role neighbours merged."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == Role.SYSTEM:
            continue
        role = "assistant" if m.role == Role.ASSISTANT else "user"
        blocks = [b for b in (_block(p) for p in m.parts) if b is not None]
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def system_blocks(messages: list[Message], *, cache: bool = True) -> list[dict[str, Any]]:
    """The system prompt as text blocks, one per text part of the chat's first system message,
    each a cache breakpoint (unless ``cache`` is off).

    The run sends the prompt as two parts — what every instance of the agent shares, then the
    instance's own tail — so the breakpoint after the first part is a prefix siblings share.
    """
    first = next((m for m in messages if m.role == Role.SYSTEM), None)
    texts = [p.text for p in first.parts if isinstance(p, Text) and p.text] if first is not None else []
    blocks: list[dict[str, Any]] = []
    for text in texts[:3]:  # the API allows 4 breakpoints; the tools take one
        block: dict[str, Any] = {"type": "text", "text": text}
        if cache:
            block["cache_control"] = dict(EPHEMERAL)
        blocks.append(block)
    if len(texts) > 3:
        blocks[-1]["text"] = "".join(texts[2:])
    return blocks


def encode_tools(tools: list[ToolSpec], *, cache: bool = True) -> list[dict[str, Any]]:
    """Tool definitions; the last one carries ``cache_control`` (unless ``cache`` is off)."""
    out: list[dict[str, Any]] = [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema or {"type": "object"}}
        for t in tools
    ]
    if out and cache:
        out[-1]["cache_control"] = dict(EPHEMERAL)
    return out


def decode_content(content: list[dict[str, Any]]) -> list[Any]:
    """Response blocks → parts: ``text`` → Text, ``tool_use`` → ToolCall (same id and name)."""
    parts: list[Any] = []
    for block in content:
        if block.get("type") == "text":
            parts.append(Text(text=block.get("text", "")))
        elif block.get("type") == "tool_use":
            arguments = json.dumps(block.get("input") or {})
            parts.append(ToolCall(id=block.get("id") or "", name=block["name"], arguments=arguments))
    return parts


ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}
"""The HTTP status each of Anthropic's error types answers with: an ``error`` event in a stream is
classified (retried, fallen back from) as that answer would be."""


class AnthropicStream:
    """A streamed Messages answer put back together (see the module docstring)."""

    def __init__(self, *, provider: str = "anthropic", model: str = "") -> None:
        self.provider, self.model = provider, model
        self.message: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json: dict[int, list[str]] = {}
        self.done = False

    def feed(self, name: str, data: str) -> str:
        event = event_json(data)
        kind = event.get("type") or name
        if kind == "message_start":
            self.message = dict(event.get("message") or {})
            self.message["usage"] = dict(self.message.get("usage") or {})
        elif kind == "content_block_start":
            index = int(event.get("index") or 0)
            self.blocks[index] = dict(event.get("content_block") or {})
            if self.blocks[index].get("type") == "tool_use":
                self.json[index] = []
        elif kind == "content_block_delta":
            return self._delta(int(event.get("index") or 0), event.get("delta") or {})
        elif kind == "message_delta":
            self.message.update({k: v for k, v in (event.get("delta") or {}).items() if v is not None})
            self.message.setdefault("usage", {}).update(event.get("usage") or {})
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            error = event.get("error") or {}
            raise http_error(provider=self.provider, model=self.model, status=ERROR_STATUS.get(error.get("type"), 500),
                             body=data)
        return ""

    def _delta(self, index: int, delta: dict[str, Any]) -> str:
        block = self.blocks.setdefault(index, {"type": "text", "text": ""})
        if delta.get("type") == "text_delta":
            text = str(delta.get("text") or "")
            block["text"] = str(block.get("text") or "") + text
            return text
        if delta.get("type") == "input_json_delta":
            self.json.setdefault(index, []).append(str(delta.get("partial_json") or ""))
        return ""

    def answer(self) -> dict[str, Any]:
        if not self.done:
            raise IncompleteStream(f"the stream ended before message_stop ({len(self.blocks)} blocks read)")
        for index, pieces in self.json.items():
            text = "".join(pieces)
            try:
                self.blocks[index]["input"] = json.loads(text) if text.strip() else {}
            except ValueError:  # cut by max_tokens: the reply is refused as truncated, its arguments named
                self.blocks[index]["input"] = {"_raw": text}
        return {**self.message, "content": [self.blocks[i] for i in sorted(self.blocks)]}


class AnthropicCompleter(HTTPCompleter):
    """Claude over the Messages API."""

    kind: ClassVar[str] = "anthropic"
    default_base_url: ClassVar[str] = "https://api.anthropic.com"
    auth_header: ClassVar[str] = "x-api-key"
    auth_scheme: ClassVar[str] = ""
    extra_headers: ClassVar[dict[str, str]] = {"anthropic-version": "2023-06-01"}
    assembler = AnthropicStream

    def endpoint(self) -> str:
        return "/messages"

    def encode(self, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens}
        system = system_blocks(messages, cache=self.prompt_cache)
        if system:
            body["system"] = system
        body["messages"] = encode_messages(messages)
        if tools:
            body["tools"] = encode_tools(tools, cache=self.prompt_cache)
        if self.temperature:
            body["temperature"] = self.temperature
        return body

    def decode(self, data: Any) -> tuple[Message, Usage]:
        reply = assistant_reply(decode_content(data.get("content") or []), data.get("stop_reason"))
        u = data.get("usage") or {}
        usage = Usage(
            input_tokens=int(u.get("input_tokens") or 0),
            output_tokens=int(u.get("output_tokens") or 0),
            cache_creation_tokens=int(u.get("cache_creation_input_tokens") or 0),
            cache_read_tokens=int(u.get("cache_read_input_tokens") or 0),
        )
        return reply, usage
