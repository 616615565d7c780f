"""The HTTP base every vendor provider composes: one JSON POST per completion.

:class:`HTTPCompleter` is the template a vendor fills in: where to POST (``endpoint``), how to
authenticate (``auth_header``/``auth_scheme``), and the two pure mappings ``encode`` (messages →
request JSON) and ``decode`` (response JSON → message and usage). The POST itself, the connection
pool and the translation of failures into typed model errors are the transport's
(:mod:`shelly_dist.providers.transport`), so no vendor module touches an HTTP library.

When a person watches the run (:mod:`shelly_dist.models.streaming`) and the provider's config does
not say ``stream: false``, the same request is sent asking for a stream (``stream_request``), each
server-sent event goes to the vendor's :class:`StreamAssembler`, whose text deltas go to the
watcher, and what the assembler rebuilt — the answer the vendor would have sent unstreamed — goes
through the same ``decode``: a streamed reply is the same message, tool calls validated the same.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from contextlib import aclosing
from typing import Any, ClassVar, Protocol

from shelly_dist.chats import Chat, Message, Role, ToolCall
from shelly_dist.chats.replies import STOP_REASON, arguments_object
from shelly_dist.errors import ContextTooLong, ModelError
from shelly_dist.models import streaming
from shelly_dist.models.classify import BAD_REQUEST, NETWORK, SERVER, transport_error
from shelly_dist.models.completer import ToolSpec
from shelly_dist.models.context import ContextWindow, estimate_tokens, prompt_from_error, window_from_error
from shelly_dist.models.speed import SPEED, server_speed
from shelly_dist.models.usage import Usage, UsageTracker
from shelly_dist.providers.transport import aclose_http_client as aclose_http_client  # re-exported
from shelly_dist.providers.transport import post_json, post_stream

_VERSIONED = re.compile(r"/v\d+(?:(?:alpha|beta)\d*)?$")


def api_url(base_url: str, version: str, path: str) -> str:
    """``base_url`` is the API root: ``/{version}`` is added unless it already ends in a version."""
    base = base_url.rstrip("/")
    if not _VERSIONED.search(base):
        base += f"/{version}"
    return base + path


def system_text(messages: list[Message]) -> str:
    """The system prompt: the text of the first system message ("" when none)."""
    return next((m.text_content() for m in messages if m.role == Role.SYSTEM), "")


def call_arguments(call: ToolCall) -> dict[str, Any]:
    """A tool call's arguments as an object to send back: empty gives ``{}``, text that is not a
    JSON object ``{"_raw": text}`` (:func:`~shelly_dist.chats.replies.arguments_object`)."""
    return arguments_object(call.arguments)


def new_call_id() -> str:
    """A fresh tool-call id (``call_<24 hex>``), for servers that send none."""
    return f"call_{uuid.uuid4().hex[:24]}"


def unique_call_ids(parts: list[Any]) -> list[Any]:
    """``parts`` with every tool call holding an id no other call of the reply holds.

    Why: OpenAI-compatible local servers (Ollama, llama.cpp, some vLLM builds) may send a tool
    call with no id, a null one or ``""``, and Gemini never sends ids. Results are matched to
    calls by id, so two calls sharing one would overwrite each other's result, and on the pool
    their children would share one run id. A missing or repeated id is replaced by a fresh
    :func:`new_call_id`; the reply is journaled before its tools run, so the id is stable
    across redeliveries.
    """
    seen: set[str] = set()
    out: list[Any] = []
    for part in parts:
        if isinstance(part, ToolCall):
            if not part.id or part.id in seen:
                part = part.model_copy(update={"id": new_call_id()})
            seen.add(part.id)
        out.append(part)
    return out


def assistant_reply(parts: list[Any], stop_reason: str | None = None) -> Message:
    """The assistant message of a decoded answer, with the vendor's stop reason in its metadata.

    Every tool call in it has an id of its own (:func:`unique_call_ids`).
    """
    reply = Message(role=Role.ASSISTANT, parts=unique_call_ids(parts))
    if stop_reason:
        reply.metadata[STOP_REASON] = stop_reason
    return reply


class StreamAssembler(Protocol):
    """Rebuilds a vendor's answer from its stream: ``feed`` each event, ``answer`` at the end.
    Built with ``provider=`` and ``model=`` (named in the errors a stream may carry)."""

    def __init__(self, *, provider: str, model: str) -> None: ...

    def feed(self, name: str, data: str) -> str:
        """Take one server-sent event (``name`` ``""`` when unnamed); return the text it adds."""
        ...

    def answer(self) -> Any:
        """The answer JSON the vendor would have sent unstreamed; ``IncompleteStream`` when the
        stream ended before the answer did."""
        ...


class IncompleteStream(ValueError):
    """The stream ended (the connection closed) before the vendor said the answer was complete."""


def event_json(data: str) -> Any:
    """An event's JSON payload (``ValueError`` when it is not JSON)."""
    return json.loads(data)


class HTTPCompleter:
    """A completer that maps the chat to one vendor's JSON, POSTs it, and maps the answer back.

    Subclasses set the class attributes and implement ``endpoint``, ``encode`` and ``decode``.
    ``usage`` totals every call this instance made; each reply also carries its own usage.
    """

    kind: ClassVar[str] = ""
    default_base_url: ClassVar[str] = ""
    api_version: ClassVar[str] = "v1"
    auth_header: ClassVar[str] = "Authorization"
    auth_scheme: ClassVar[str] = "Bearer"
    default_max_tokens: ClassVar[int] = 4096
    extra_headers: ClassVar[dict[str, str]] = {}
    assembler: ClassVar[type[StreamAssembler] | None] = None
    """The vendor's stream reader; ``None``: this kind never streams."""
    takes: ClassVar[frozenset[str]] = frozenset({"image", "document"})
    """The attachment parts the vendor's API takes; a chat holding another is refused before any
    request, naming the part (an attached PDF to a server that reads images only)."""

    def __init__(
        self,
        *,
        model: str,
        name: str | None = None,
        base_url: str | None = None,
        api_key: str = "",
        max_tokens: int | None = None,
        timeout: float | None = None,
        headers: dict[str, str] | None = None,
        temperature: float | None = None,
        usage: UsageTracker | None = None,
        prompt_cache: bool = True,
        stream: bool = True,
    ) -> None:
        self.name = name or self.kind
        self.model = model
        self.base_url = base_url or self.default_base_url
        self.max_tokens = max_tokens or self.default_max_tokens
        self.timeout = timeout
        self.temperature = temperature
        self.usage = usage or UsageTracker()
        self.prompt_cache = prompt_cache
        """Say what is cacheable where the vendor needs it said (Anthropic); others ignore it."""
        self.stream = stream
        """Stream when a person watches (``stream: false`` in the config turns it off)."""
        self._headers = dict(self.extra_headers)
        if api_key:
            self._headers[self.auth_header] = f"{self.auth_scheme} {api_key}" if self.auth_scheme else api_key
        self._headers.update(headers or {})
        self.window: ContextWindow | None = None
        """The provider's context window and token ratio, learned from this completer's answers
        (:meth:`attach_window`); ``None``: nothing is learned."""

    def attach_window(self, window: ContextWindow) -> None:
        """Learn into ``window``: the ratio of the server's prompt tokens to the estimate from
        every answer, the window from an overflow error's body. Providers that can ask the server
        its window or count tokens with its tokenizer also set the probes here."""
        self.window = window

    @property
    def url(self) -> str:
        return api_url(self.base_url, self.api_version, self.endpoint())

    def api(self, path: str) -> str:
        """The URL of another endpoint of this provider's API (``/files``, ``/messages/batches``)."""
        return api_url(self.base_url, self.api_version, path)

    @property
    def headers(self) -> dict[str, str]:
        """The headers every request of this provider carries (its key among them): for the batch
        endpoints, which are the same API with the same credentials."""
        return dict(self._headers)

    def error(self, text: str) -> ModelError:
        """A model error (not an HTTP one) whose message names this provider."""
        return ModelError(f'provider "{self.name}": {text}', provider=self.name, model=self.model)

    def endpoint(self) -> str:
        """The path after the version, e.g. ``/messages``."""
        raise NotImplementedError

    def encode(self, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        """The request body for ``messages`` and ``tools``."""
        raise NotImplementedError

    def decode(self, data: Any) -> tuple[Message, Usage]:
        """The reply and its usage from the answer's JSON; raises ``ModelError`` when unusable."""
        raise NotImplementedError

    def stream_request(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The URL and body that ask for the answer as a stream (default: ``"stream": true``)."""
        return self.url, {**body, "stream": True}

    def _check_parts(self, messages: list[Message]) -> None:
        for m in messages:
            for part in m.parts:
                if part.kind in ("image", "document") and part.kind not in self.takes:
                    what = getattr(part, "path", "") or part.kind
                    raise transport_error(provider=self.name, model=self.model, kind=BAD_REQUEST,
                                          detail=f"a {self.kind} provider takes no {part.kind} parts ({what}); "
                                                 f"it takes: {', '.join(sorted(self.takes)) or 'text only'}")

    async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
        messages = list(chat.view())
        self._check_parts(messages)
        body = self.encode(messages, tools)
        started = time.monotonic()
        sink = streaming.deltas()
        try:
            if sink is not None and self.stream and self.assembler is not None:
                data = await self._streamed(body, self.assembler(provider=self.name, model=self.model), sink)
            else:
                data = await post_json(
                    self.url,
                    body,
                    headers=self._headers,
                    read_timeout=self.timeout,
                    provider=self.name,
                    model=self.model,
                )
        except ContextTooLong as exc:
            if self.window is not None:
                if tokens := window_from_error(exc.body):
                    self.window.learned(tokens, "the server's overflow error")
                if counted := prompt_from_error(exc.body):
                    self.window.observe(estimate_tokens(messages, tools), counted,
                                        source="the server's overflow error")
            raise
        try:
            reply, usage = self.decode(data)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise self._unexpected(exc) from exc
        if self.window is not None:
            self.window.observe(estimate_tokens(messages, tools),
                                usage.input_tokens + usage.cache_read_tokens + usage.cache_creation_tokens)
        speed = server_speed(data, usage, time.monotonic() - started)
        if speed:
            reply.metadata[SPEED] = speed
        self.usage.add(usage)
        return usage.attach(reply)

    async def _streamed(self, body: dict[str, Any], assembler: StreamAssembler, sink: streaming.Deltas) -> Any:
        """Ask for a stream, hand its text to ``sink`` as it comes, return the rebuilt answer."""
        url, body = self.stream_request(body)
        sink.begin()
        events = post_stream(url, body, headers=self._headers, read_timeout=self.timeout, provider=self.name,
                             model=self.model)
        try:
            async with aclosing(events):
                async for name, data in events:
                    if text := assembler.feed(name, data):
                        sink.text(text)
            return assembler.answer()
        except IncompleteStream as exc:  # the connection closed early: worth another try
            raise transport_error(provider=self.name, model=self.model, kind=NETWORK, detail=str(exc)) from exc
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise self._unexpected(exc) from exc

    def _unexpected(self, exc: Exception) -> ModelError:
        return transport_error(
            provider=self.name, model=self.model, kind=SERVER, detail=f"unexpected answer shape: {exc!r}"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, base_url={self.base_url!r})"
