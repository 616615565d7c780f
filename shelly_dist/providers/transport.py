"""The providers' HTTP transport: one JSON POST, its failures translated into typed model errors.

Every vendor provider reaches the network through :func:`post_json` only, so the client library
is this module's business alone. It is aiohttp: ``python -m bench.transport`` measured it against
httpx2 on the bench machine (docs/benchmarks.md, "The provider transport") — 500 concurrent calls
at 1 s took about 1.3 s through one aiohttp session against 1.6–1.8 s through 16 httpx2 clients and
3–4 s through one (httpcore's pool scans every open connection on each request), and it spends
several times less CPU per call, which is what a worker holding hundreds of runs on one core pays.

One ``aiohttp.ClientSession`` per event loop, shared by every provider on that loop, so
connections are pooled across agents and providers (a worker process runs one long-lived loop that
holds hundreds of concurrent calls). Timeouts are passed per request, so each provider keeps its
own. The session behaves as the httpx2 client did: redirects are not followed (a 3xx is an error
answer), and proxies and CA bundles are taken from the environment (``HTTP_PROXY``,
``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``; ``SSL_CERT_FILE`` through OpenSSL), and no
credentials are taken from ``~/.netrc``. The proxy is chosen here, once per scheme and host
(:func:`_proxy`), not by aiohttp's ``trust_env``: that reads ``~/.netrc`` and the environment on
every request, each time on a thread of the loop's executor (parsing `~/.netrc` alone was 3 % of
a busy worker's samples).

Failures are translated here, at the boundary, into the typed errors of
:mod:`shelly_dist.models.classify` (``raise … from exc``), so nothing above imports aiohttp:
timeouts → ``timeout``, connection problems → ``network``, error statuses → classified by status
and body with ``Retry-After`` parsed, a 2xx body that is not JSON → ``server``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import urllib.request
import weakref
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError

from shelly_dist.models.classify import (
    NETWORK,
    SERVER,
    TIMEOUT,
    http_error,
    parse_retry_after,
    transport_error,
)
from shelly_dist.models.governor.headers import heard
from shelly_dist.providers.sse import SSEReader

DEFAULT_TIMEOUT = 600.0
"""Seconds to wait for an answer (Shelly's 10-minute client timeout): long generations are slow."""

CONNECT_TIMEOUT = 10.0
"""Seconds to open a connection: a host that does not answer this fast is down, not busy."""

MAX_CONNECTIONS = 1000
"""Open connections per event loop, all hosts together: the rest wait for one (file descriptors are
finite; a worker rarely holds more calls than this at once)."""

MAX_EVENT_LINE = 16 * 1024 * 1024
"""Bytes of one line of a streamed answer (a vendor's event is a few hundred; aiohttp's own limit,
128 KiB, could cut a server that sends a long reply as one event)."""

_sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession] = weakref.WeakKeyDictionary()
_sessions_lock = threading.Lock()


_closers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


async def _close_at_shutdown(session: aiohttp.ClientSession) -> AsyncIterator[None]:
    """Closes ``session`` when its loop shuts its async generators down (``asyncio.run`` does, as
    it ends): a program that never calls :func:`aclose_http_client` — a script using the Python
    API with a real provider — no longer ends with aiohttp's "Unclosed client session"."""
    try:
        yield
    finally:
        await session.close()


def http_session() -> aiohttp.ClientSession:
    """The pooled session of the running event loop (created on first use, again after a close)."""
    loop = asyncio.get_running_loop()
    with _sessions_lock:
        session = _sessions.get(loop)
        if session is None or session.closed:
            session = _sessions[loop] = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=MAX_CONNECTIONS, limit_per_host=0),
            )
            closer = _close_at_shutdown(session)
            # Started on the loop, so the loop's shutdown finalizes it; both kept, so neither is
            # collected (an unfinished generator's finalizer would close the session early).
            _closers[loop] = (closer, loop.create_task(closer.__anext__()))
        return session


async def aclose_http_client() -> None:
    """Close the running loop's session (at worker shutdown or CLI exit). Idempotent."""
    with _sessions_lock:
        session = _sessions.pop(asyncio.get_running_loop(), None)
    if session is not None:
        await session.close()


@functools.lru_cache(maxsize=256)
def _proxy(scheme: str, host: str) -> str | None:
    """The proxy for ``scheme://host`` from the environment, or ``None`` (none set, or ``NO_PROXY``
    names the host). Read once per scheme and host, as httpx2 read it once per client."""
    proxies = urllib.request.getproxies()
    if not proxies or urllib.request.proxy_bypass(host):
        return None
    return proxies.get(scheme) or proxies.get("all")


def _timeout(seconds: float | None) -> aiohttp.ClientTimeout:
    """``seconds`` bounds each wait for the server (``sock_read``) and for a pooled connection."""
    read = seconds or DEFAULT_TIMEOUT
    return aiohttp.ClientTimeout(total=None, connect=read, sock_connect=min(CONNECT_TIMEOUT, read), sock_read=read)


def encode_json(body: Any) -> bytes:
    """Compact UTF-8 JSON, as httpx2 sent it (no NaN: no vendor accepts it)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _open(method: str, url: str, data: bytes | aiohttp.FormData | None, headers: dict[str, str],
          read_timeout: float | None) -> Any:
    """The request every way of answering shares (an ``async with`` of aiohttp's)."""
    parts = urlsplit(url)
    return http_session().request(
        method,
        url,
        data=data,
        headers=headers,
        timeout=_timeout(read_timeout),
        allow_redirects=False,
        proxy=_proxy(parts.scheme, parts.hostname or ""),
    )


def _failed(exc: BaseException, url: str, provider: str, model: str) -> Exception:
    """The typed model error for what aiohttp raised (a timeout, or a connection problem)."""
    if isinstance(exc, TimeoutError):  # aiohttp's connect/read timeouts are TimeoutErrors (and some ClientErrors)
        return transport_error(
            provider=provider,
            model=model,
            kind=TIMEOUT,
            detail=f"no answer from {url} in time ({type(exc).__name__})",
        )
    detail = f"{type(exc).__name__} for {url}: {exc}"
    return transport_error(provider=provider, model=model, kind=NETWORK, detail=detail)


def _refused(status: int, raw: bytes, retry_after: str | None, provider: str, model: str) -> Exception:
    """The typed model error of an answer that is not a 2xx."""
    return http_error(
        provider=provider,
        model=model,
        status=status,
        body=raw.decode(errors="replace"),
        retry_after=parse_retry_after(retry_after),
    )


def _json_headers(headers: dict[str, str]) -> dict[str, str]:
    return {"Content-Type": "application/json", **headers}


async def post_json(
    url: str, body: Any, *, headers: dict[str, str], read_timeout: float | None, provider: str, model: str
) -> Any:
    """POST ``body`` as JSON and return the decoded answer; raise a typed model error otherwise."""
    return await request_json("POST", url, body, headers=headers, read_timeout=read_timeout, provider=provider,
                              model=model)


async def get_json(url: str, *, headers: dict[str, str], read_timeout: float | None, provider: str, model: str) -> Any:
    """GET ``url`` and return the decoded answer (a server's ``/props`` or ``/v1/models``)."""
    return await request_json("GET", url, None, headers=headers, read_timeout=read_timeout, provider=provider,
                              model=model)


async def request_json(
    method: str, url: str, body: Any, *, headers: dict[str, str], read_timeout: float | None, provider: str,
    model: str,
) -> Any:
    """One request with an optional JSON body; the decoded answer, or a typed model error."""
    raw = await request(method, url, data=encode_json(body) if body is not None else None,
                        headers=_json_headers(headers) if body is not None else headers,
                        read_timeout=read_timeout, provider=provider, model=model)
    return decode_json(raw, provider=provider, model=model)


def decode_json(raw: bytes, *, provider: str, model: str) -> Any:
    """The JSON of a 2xx answer; a body that is not JSON is a ``server`` model error."""
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise transport_error(
            provider=provider,
            model=model,
            kind=SERVER,
            detail=f"malformed JSON in answer: {raw.decode(errors='replace')[:200]!r}",
        ) from exc


async def request(
    method: str,
    url: str,
    *,
    headers: dict[str, str],
    read_timeout: float | None,
    provider: str,
    model: str,
    data: bytes | aiohttp.FormData | None = None,
) -> bytes:
    """Send one request and return the body of a 2xx answer; raise a typed model error otherwise.

    ``data`` is sent as is (JSON bytes, or a multipart form for a file upload: the batch APIs).
    """
    try:
        async with _open(method, url, data, headers, read_timeout) as resp:
            status, retry_after, raw = resp.status, resp.headers.get("Retry-After"), await resp.read()
            heard(resp.headers)  # the vendor's rate-limit headers, to the governor of this call
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise _failed(exc, url, provider, model) from exc
    if not 200 <= status < 300:
        raise _refused(status, raw, retry_after, provider, model)
    return raw


async def post_stream(
    url: str, body: Any, *, headers: dict[str, str], read_timeout: float | None, provider: str, model: str
) -> AsyncIterator[tuple[str, str]]:
    """POST ``body`` as JSON and yield the answer's server-sent events as ``(name, data)``, as they
    arrive; failures are the typed model errors of :func:`request`. ``read_timeout`` bounds each
    wait for the next piece of the stream, not the whole answer. Close the iterator (``aclosing``)
    to give the connection back when stopping early."""
    try:
        async with _open("POST", url, encode_json(body), _json_headers(headers), read_timeout) as resp:
            heard(resp.headers)  # a streamed answer's rate-limit headers count as much as any other's
            if not 200 <= resp.status < 300:
                raise _refused(resp.status, await resp.read(), resp.headers.get("Retry-After"), provider, model)
            reader = SSEReader()
            while raw := await resp.content.readline(max_line_length=MAX_EVENT_LINE):
                event = reader.feed(raw.decode("utf-8", errors="replace"))
                if event is not None:
                    yield event
            last = reader.end()
            if last is not None:
                yield last
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise _failed(exc, url, provider, model) from exc
    except HttpProcessingError as exc:  # a line over MAX_EVENT_LINE: no vendor sends one
        raise transport_error(provider=provider, model=model, kind=SERVER, detail=f"malformed stream: {exc}") from exc
