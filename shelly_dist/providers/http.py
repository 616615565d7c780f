"""The HTTP base every vendor provider composes: one JSON POST per completion.

One ``httpx2.AsyncClient`` per event loop, shared by every provider on that loop, so connections
are pooled across agents and providers (a worker process runs one long-lived loop that holds
hundreds of concurrent calls). Timeouts are passed per request, so each provider keeps its own.

Failures are translated here, at the boundary, into the typed errors of
:mod:`shelly_dist.models.classify` (``raise … from exc``), so nothing above imports httpx2:
timeouts → ``timeout``, connection problems → ``network``, error statuses → classified by status
and body with ``Retry-After`` parsed, a 2xx body that is not JSON → ``server``.

:class:`HTTPCompleter` is the template a vendor fills in: where to POST (``endpoint``), how to
authenticate (``auth_header``/``auth_scheme``), and the two pure mappings ``encode`` (messages →
request JSON) and ``decode`` (response JSON → message and usage).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import re
import ssl
import threading
import uuid
import weakref
from typing import Any, ClassVar

import httpx2

from shelly_dist.chats import Chat, Message, Role, ToolCall
from shelly_dist.errors import ModelError
from shelly_dist.models.classify import (
    NETWORK,
    SERVER,
    TIMEOUT,
    http_error,
    parse_retry_after,
    transport_error,
)
from shelly_dist.models.completer import ToolSpec
from shelly_dist.models.usage import Usage, UsageTracker

DEFAULT_TIMEOUT = 600.0
"""Seconds to wait for an answer (Shelly's 10-minute client timeout): long generations are slow."""

CONNECT_TIMEOUT = 10.0
"""Seconds to open a connection: a host that does not answer this fast is down, not busy."""

_VERSIONED = re.compile(r"/v\d+(?:(?:alpha|beta)\d*)?$")

SHARDS = 16
"""Clients per event loop. httpcore's pool checks every open connection on each request, so one
pool with hundreds of connections costs time quadratic in them (bench: 500 concurrent calls at 1 s
took 2.06 s through one client, 1.40 s spread over 16). Requests are spread round-robin."""

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[httpx2.AsyncClient]] = weakref.WeakKeyDictionary()
_turn = itertools.count()
_clients_lock = threading.Lock()


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One TLS context for every shard: each context loads the CA bundle (~1 MB of RSS apiece)."""
    return httpx2.create_ssl_context()


def _new_client() -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        limits=httpx2.Limits(max_connections=1000 // SHARDS, max_keepalive_connections=200 // SHARDS),
        timeout=httpx2.Timeout(DEFAULT_TIMEOUT, connect=CONNECT_TIMEOUT),
        verify=_ssl_context(),
    )


def http_client() -> httpx2.AsyncClient:
    """A pooled client of the running event loop (the next of its shards; created on first use)."""
    loop = asyncio.get_running_loop()
    with _clients_lock:
        shards = _clients.get(loop)
        if shards is None:
            shards = _clients[loop] = [_new_client() for _ in range(SHARDS)]
        i = next(_turn) % SHARDS
        if shards[i].is_closed:
            shards[i] = _new_client()
        return shards[i]


async def aclose_http_client() -> None:
    """Close the running loop's clients (at worker shutdown or CLI exit). Idempotent."""
    with _clients_lock:
        shards = _clients.pop(asyncio.get_running_loop(), [])
    for client in shards:
        await client.aclose()


def api_url(base_url: str, version: str, path: str) -> str:
    """``base_url`` is the API root: ``/{version}`` is added unless it already ends in a version."""
    base = base_url.rstrip("/")
    if not _VERSIONED.search(base):
        base += f"/{version}"
    return base + path


def _timeout(seconds: float | None) -> httpx2.Timeout:
    read = seconds or DEFAULT_TIMEOUT
    return httpx2.Timeout(read, connect=min(CONNECT_TIMEOUT, read))


async def post_json(
    url: str, body: Any, *, headers: dict[str, str], read_timeout: float | None, provider: str, model: str
) -> Any:
    """POST ``body`` as JSON and return the decoded answer; raise a typed model error otherwise."""
    try:
        resp = await http_client().post(url, json=body, headers=headers, timeout=_timeout(read_timeout))
    except httpx2.TimeoutException as exc:
        raise transport_error(
            provider=provider,
            model=model,
            kind=TIMEOUT,
            detail=f"no answer from {url} in time ({type(exc).__name__})",
        ) from exc
    except httpx2.TransportError as exc:
        raise transport_error(
            provider=provider, model=model, kind=NETWORK, detail=f"{type(exc).__name__} for {url}: {exc}"
        ) from exc
    if not resp.is_success:
        raise http_error(
            provider=provider,
            model=model,
            status=resp.status_code,
            body=resp.text,
            retry_after=parse_retry_after(resp.headers.get("retry-after")),
        )
    try:
        return resp.json()
    except ValueError as exc:
        raise transport_error(
            provider=provider,
            model=model,
            kind=SERVER,
            detail=f"malformed JSON in answer: {resp.text[:200]!r}",
        ) from exc


def system_text(messages: list[Message]) -> str:
    """The system prompt: the text of the first system message ("" when none)."""
    return next((m.text_content() for m in messages if m.role == Role.SYSTEM), "")


def call_arguments(call: ToolCall) -> dict[str, Any]:
    """A tool call's arguments as an object; empty or invalid JSON gives ``{}``."""
    try:
        value = json.loads(call.arguments) if call.arguments.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


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
        reply.metadata["stop_reason"] = stop_reason
    return reply


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
    ) -> None:
        self.name = name or self.kind
        self.model = model
        self.base_url = base_url or self.default_base_url
        self.max_tokens = max_tokens or self.default_max_tokens
        self.timeout = timeout
        self.temperature = temperature
        self.usage = usage or UsageTracker()
        self._headers = dict(self.extra_headers)
        if api_key:
            self._headers[self.auth_header] = f"{self.auth_scheme} {api_key}" if self.auth_scheme else api_key
        self._headers.update(headers or {})

    @property
    def url(self) -> str:
        return api_url(self.base_url, self.api_version, self.endpoint())

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

    async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
        body = self.encode(list(chat.view()), tools)
        data = await post_json(
            self.url,
            body,
            headers=self._headers,
            read_timeout=self.timeout,
            provider=self.name,
            model=self.model,
        )
        try:
            reply, usage = self.decode(data)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise transport_error(
                provider=self.name, model=self.model, kind=SERVER, detail=f"unexpected answer shape: {exc!r}"
            ) from exc
        self.usage.add(usage)
        return usage.attach(reply)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, base_url={self.base_url!r})"
