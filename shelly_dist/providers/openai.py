"""OpenAI chat completions (``POST /v1/chat/completions``) — and every server that speaks it.

Grok, Ollama, vLLM, llama.cpp and LM Studio all answer this format; point ``base_url`` at them.
The mapping is Shelly's ``openaicompat``:

- system and user messages carry string content, unless they hold an image or a document; then
  content is an array of parts (``text``, ``image_url`` with a data URI, ``file`` with
  ``filename`` — default ``"document"`` — and ``file_data``);
- assistant messages have ``content: null`` when they hold no text, plus ``tool_calls`` whose
  ``arguments`` are always a JSON object (text that is not one is sent as ``{"_raw": text}``:
  strict servers refuse the whole request otherwise);
- consecutive user (or assistant) messages are merged into one, and a text-only user message
  right after tool results is appended to the last result, so roles alternate as strict chat
  templates (Mistral's) require;
- a system prompt sent as two text parts (the run sends what every instance of the agent shares,
  then its own ``<identity>`` and blackboard snapshot) becomes the system message of the first and
  the head of the first user turn of the second, so siblings share the prompt up to their task
  whichever side of the system prompt the server's template renders the tools;
- every tool result becomes its own ``{role: tool, tool_call_id, content}`` message (the format
  has no error flag, so ``is_error`` is lost, as in Shelly);
- tools are ``{type: function, function: {name, description, parameters}}``, a missing schema
  becoming ``{"type": "object"}``;
- usage: ``prompt_tokens`` *includes* ``prompt_tokens_details.cached_tokens`` (OpenAI, vLLM,
  llama.cpp), so input is ``prompt_tokens - cached_tokens`` and cache-read is ``cached_tokens``:
  each token is counted once; an answer with no choices is an error ("empty choices");
- a tool call without an id (Ollama, llama.cpp and some vLLM builds send none, null or ``""``)
  gets a fresh ``call_<hex>`` id, unique in its reply, so each result finds its own call;
- streamed (``stream: true`` with ``stream_options.include_usage``), the chunks' ``delta``s are
  put back together (:class:`OpenAIStream`): text concatenated, each tool call's pieces joined by
  its ``index`` as the OpenAI SDK joins them, the finish reason and the usage chunk kept; ``data:
  [DONE]`` ends the answer.
"""

from __future__ import annotations

import os
import re
from typing import Any, ClassVar
from urllib.parse import urlsplit

from shelly_dist.chats import Document, Image, Message, Role, Text, ToolCall
from shelly_dist.chats.replies import wire_arguments
from shelly_dist.errors import ModelError
from shelly_dist.models.classify import http_error
from shelly_dist.models.completer import ToolSpec
from shelly_dist.models.context import ContextWindow
from shelly_dist.models.usage import Usage
from shelly_dist.providers.http import HTTPCompleter, IncompleteStream, api_url, assistant_reply, event_json
from shelly_dist.providers.transport import get_json, post_json

PROBE_TIMEOUT = 10.0
"""Seconds a server may take to say its window or count a text: past it, the estimate stands."""

_VERSION_SUFFIX = re.compile(r"/v\d+$")


def _data_uri(media_type: str, data: str) -> str:
    return f"data:{media_type};base64,{data}"


def _content_part(part: Any) -> dict[str, Any] | None:
    if isinstance(part, Text):
        return {"type": "text", "text": part.text}
    if isinstance(part, Image):
        url = _data_uri(part.media_type or "image/png", part.data) if part.data else part.url
        return {"type": "image_url", "image_url": {"url": url}}
    if isinstance(part, Document):
        return {
            "type": "file",
            "file": {
                "filename": os.path.basename(part.path) or "document",
                "file_data": _data_uri(part.media_type or "application/pdf", part.data),
            },
        }
    return None


def _content(m: Message) -> str | list[dict[str, Any]]:
    if any(isinstance(p, Image | Document) for p in m.parts):
        return [c for c in (_content_part(p) for p in m.parts) if c is not None]
    return m.text_content()


def _as_parts(content: Any) -> list[dict[str, Any]]:
    return content if isinstance(content, list) else ([{"type": "text", "text": content}] if content else [])


def _merge(into: dict[str, Any], msg: dict[str, Any]) -> None:
    """Fold ``msg`` into the previous message of the same role: texts joined by a blank line, part
    arrays concatenated, tool calls appended."""
    a, b = into.get("content"), msg.get("content")
    if isinstance(a, list) or isinstance(b, list):
        into["content"] = _as_parts(a) + _as_parts(b)
    else:
        joined = "\n\n".join(t for t in (a, b) if t)
        into["content"] = joined or (None if into["role"] == "assistant" else "")
    if msg.get("tool_calls"):
        into["tool_calls"] = [*(into.get("tool_calls") or []), *msg["tool_calls"]]


def encode_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """All roles in order; one ``tool`` message per tool result; neighbours of one role merged;
    a system prompt in two parts sends its second (the instance's own) at the head of the first
    user turn.

    Why the split: chat templates render the tools *after* the system prompt (ChatML, Qwen,
    llama.cpp's generic one), so anything per-instance in the system prompt — ``<identity>``
    names the instance — would end the prefix siblings share before the tools. With the own part
    in the first user turn, siblings of one agent send byte-identical system prompts and tools.

    Why the merge: chat templates of strict servers (llama.cpp's bundled Mistral templates, vLLM
    with the vendor's template) reject two user or two assistant turns in a row with ``conversation
    roles must alternate``, and a delegated child's chat starts with two or three user messages
    (context, reflections, task). Tool messages are never merged: each answers its own call. A
    text-only user message right after tool results (the iteration warning, an effect's nudge) is
    appended to the last result instead: Mistral's templates and API refuse ``user`` after
    ``tool``.
    """
    out: list[dict[str, Any]] = []
    own = ""
    for m in messages:
        results = m.tool_results()
        if m.role == Role.TOOL or results:
            out.extend({"role": "tool", "tool_call_id": r.tool_call_id, "content": r.content} for r in results)
            continue
        if m.role == Role.ASSISTANT:
            msg: dict[str, Any] = {"role": "assistant", "content": m.text_content() or None}
            calls = m.tool_calls()
            if calls:
                msg["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": wire_arguments(c.arguments)},
                    }
                    for c in calls
                ]
        elif m.role == Role.SYSTEM and not out and len(texts := [p for p in m.parts if isinstance(p, Text)]) > 1:
            msg = {"role": "system", "content": texts[0].text}
            own = "".join(p.text for p in texts[1:]).strip()
        else:
            msg = {"role": str(m.role), "content": _content(m)}
        if out and out[-1]["role"] == msg["role"] and msg["role"] in ("user", "assistant"):
            _merge(out[-1], msg)
        elif out and out[-1]["role"] == "tool" and msg["role"] == "user" and isinstance(msg["content"], str):
            out[-1]["content"] = f"{out[-1]['content']}\n\n{msg['content']}"  # a nudge after the results
        else:
            out.append(msg)
    first_user = next((m for m in out if m["role"] == "user"), None)
    if own and first_user is not None:
        first_user["content"] = _prefixed(own, first_user["content"])
    elif own:
        out[0]["content"] += "\n\n" + own
    return out


def _prefixed(text: str, content: str | list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if isinstance(content, list):
        return [{"type": "text", "text": text + "\n\n"}, *content]
    return f"{text}\n\n{content}" if content else text


def encode_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema or {"type": "object"},
            },
        }
        for t in tools
    ]


class OpenAIStream:
    """A streamed chat completion put back together (see the module docstring)."""

    def __init__(self, *, provider: str = "openai", model: str = "") -> None:
        self.provider, self.model = provider, model
        self.text: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.finish: str | None = None
        self.usage: dict[str, Any] = {}
        self.done = False
        self.chunks = 0

    def feed(self, name: str, data: str) -> str:
        if data.strip() == "[DONE]":
            self.done = True
            return ""
        chunk = event_json(data)
        if chunk.get("error"):  # a server that fails mid-answer: as a 500 answer would be
            raise http_error(provider=self.provider, model=self.model, status=500, body=data)
        self.chunks += 1
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        choices = chunk.get("choices") or []
        if not choices:
            return ""
        choice = choices[0]
        self.finish = choice.get("finish_reason") or self.finish
        delta = choice.get("delta") or {}
        for piece in delta.get("tool_calls") or []:
            call = self.calls.setdefault(int(piece.get("index") or 0), {"id": "", "name": "", "arguments": ""})
            call["id"] = call["id"] or piece.get("id") or ""
            fn = piece.get("function") or {}
            call["name"] += fn.get("name") or ""
            call["arguments"] += fn.get("arguments") or ""
        text = delta.get("content") or ""
        if text:
            self.text.append(text)
        return text

    def answer(self) -> dict[str, Any]:
        if not self.done:
            raise IncompleteStream(f"the stream ended after {self.chunks} chunks, before [DONE]")
        if not self.chunks:
            return {"choices": [], "usage": self.usage}
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.calls:
            message["tool_calls"] = [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for _, c in sorted(self.calls.items())
            ]
        return {"choices": [{"index": 0, "message": message, "finish_reason": self.finish}], "usage": self.usage}


class OpenAICompleter(HTTPCompleter):
    """OpenAI, or any OpenAI-compatible server reached through ``base_url``."""

    kind: ClassVar[str] = "openai"
    default_base_url: ClassVar[str] = "https://api.openai.com"
    empty_error: ClassVar[str] = "empty choices in response"
    assembler = OpenAIStream

    def endpoint(self) -> str:
        return "/chat/completions"

    def stream_request(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return self.url, {**body, "stream": True, "stream_options": {"include_usage": True}}

    def attach_window(self, window: ContextWindow) -> None:
        """A server that is not OpenAI's own (llama.cpp, vLLM, Ollama, …) is asked its window and
        lent its tokenizer (:mod:`shelly_dist.models.context`)."""
        super().attach_window(window)
        if urlsplit(self.base_url).hostname != urlsplit(self.default_base_url).hostname:
            window.probe_window = self.server_window
            window.tokenize = self.server_tokens

    @property
    def root(self) -> str:
        """The server's root: ``base_url`` without its ``/v1``."""
        return _VERSION_SUFFIX.sub("", self.base_url.rstrip("/"))

    async def server_window(self) -> int | None:
        """The context the server runs with: vLLM's ``max_model_len`` or llama.cpp's ``n_ctx`` in
        ``/v1/models``, else llama.cpp's ``/props``, else Ollama's ``num_ctx`` parameter
        (``/api/show``); ``None`` when it says none (Ollama without ``num_ctx`` truncates to its
        default silently and says nothing)."""
        asked = {"headers": self._headers, "read_timeout": PROBE_TIMEOUT, "provider": self.name, "model": self.model}
        try:
            models = await get_json(api_url(self.base_url, self.api_version, "/models"), **asked)
            entries = [e for e in models.get("data") or [] if isinstance(e, dict)]
            mine = [e for e in entries if e.get("id") == self.model]  # a gateway lists many models
            for entry in mine or (entries if len(entries) == 1 else []):
                tokens = entry.get("max_model_len") or (entry.get("meta") or {}).get("n_ctx")
                if isinstance(tokens, int) and tokens > 0:
                    return tokens
        except (ModelError, AttributeError):
            pass
        try:
            props = await get_json(self.root + "/props", **asked)
            tokens = (props.get("default_generation_settings") or {}).get("n_ctx") or props.get("n_ctx")
            if isinstance(tokens, int) and tokens > 0:
                return tokens
        except (ModelError, AttributeError):
            pass
        try:
            show = await post_json(self.root + "/api/show", {"model": self.model}, **asked)
            match = re.search(r"(?m)^num_ctx\s+(\d+)", str(show.get("parameters") or ""))
            return int(match.group(1)) if match else None
        except (ModelError, AttributeError):
            return None

    async def server_tokens(self, text: str) -> int | None:
        """``text`` counted by the server's tokenizer (``POST /tokenize``: llama.cpp takes
        ``content`` and answers ``tokens``, vLLM takes ``prompt`` and answers ``count``)."""
        answer = await post_json(self.root + "/tokenize", {"content": text, "prompt": text, "model": self.model},
                                 headers=self._headers, read_timeout=PROBE_TIMEOUT, provider=self.name,
                                 model=self.model)
        if isinstance(answer.get("count"), int):
            return int(answer["count"])
        tokens = answer.get("tokens")
        return len(tokens) if isinstance(tokens, list) else None

    def encode(self, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": encode_messages(messages)}
        if self.max_tokens:
            body["max_tokens"] = self.max_tokens
        if tools:
            body["tools"] = encode_tools(tools)
        if self.temperature:
            body["temperature"] = self.temperature
        return body

    def decode(self, data: Any) -> tuple[Message, Usage]:
        choices = data.get("choices") or []
        if not choices:
            raise self.error(self.empty_error)
        msg = choices[0].get("message") or {}
        parts: list[Any] = []
        if msg.get("content"):
            parts.append(Text(text=msg["content"]))
        for call in msg.get("tool_calls") or []:
            fn = call.get("function") or {}
            # Local servers may omit the id (missing, null or ""); assistant_reply gives each its own.
            parts.append(ToolCall(id=call.get("id") or "", name=fn["name"], arguments=fn.get("arguments") or "{}"))
        reply = assistant_reply(parts, choices[0].get("finish_reason"))
        u = data.get("usage") or {}
        cached = int((u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        usage = Usage(
            # prompt_tokens already counts the cached ones: each token is counted once
            input_tokens=max(0, int(u.get("prompt_tokens") or 0) - cached),
            output_tokens=int(u.get("completion_tokens") or 0),
            cache_read_tokens=cached,
        )
        return reply, usage
