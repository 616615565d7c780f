"""The ``Host``/``Origin`` check and the body bound every HTTP server of Shelly's applies, in one
place: the console's gate (aiohttp) and ``shelly a2a serve`` (ASGI) both decide with
:func:`refusal`.

Why each one:

- **``Host``.** A server on loopback without a token is reachable from a web page through DNS
  rebinding (``evil.example`` re-resolved to ``127.0.0.1``): the browser then sends
  ``Host: evil.example``, which is refused (421) unless it names this server.
- **``Origin``.** A browser names the page that sent a request; one from another origin (a
  cross-site form post, a script on another site) is refused (403), so a visited page can neither
  start nor read work with what the browser holds.
- **Bodies are bounded** (413) before a handler reads them: a client cannot make the server hold
  an unbounded upload in memory. :class:`HostOriginGuard` refuses a declared ``Content-Length``
  over the bound without reading a byte, and reads a chunked body only up to the bound.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from yarl import URL

from shelly_dist.tools.mcp.bearer import ASGIApp, Message, Receive, Scope, Send

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})


def host_name(authority: str) -> str:
    """The host of a ``Host`` header value or an origin's authority, lowercased, without port or
    brackets (``[::1]:8700`` → ``::1``); ``""`` when it cannot be parsed."""
    try:
        return (URL(f"http://{authority.strip()}").host or "").lower().strip("[]")
    except ValueError:
        return ""


def allowed_hosts(bind: str, extra: Iterable[str] = ()) -> frozenset[str] | None:
    """The ``Host`` names a server bound to ``bind`` answers: loopback names and ``extra`` always,
    the bound address when it is one; ``None`` (any host) for a wildcard bind without ``extra``,
    where the token is the guard (the server cannot know the names it is reached by)."""
    names = {n.lower().strip("[]") for n in extra if n}
    bound = bind.strip("[]").lower()
    if bound in WILDCARDS:
        return frozenset(LOOPBACK_NAMES | names) if names else None
    return frozenset(LOOPBACK_NAMES | names | {bound})


def same_origin(origin: str, host: str) -> bool:
    """Whether the browser origin ``origin`` (``scheme://host[:port]``) is the page's own: its
    authority equals the request's ``Host`` (``null`` and unparsable origins never are)."""
    try:
        url = URL(origin)
    except ValueError:
        return False
    if url.scheme not in ("http", "https") or not url.host:
        return False
    authority = url.raw_authority.lower()
    return bool(host) and authority == host.strip().lower()


@dataclass(frozen=True)
class Refusal:
    status: int
    text: str


def refusal(
    *, who: str, host: str, origin: str | None, content_length: int | None, hosts: frozenset[str] | None,
    max_body: int, allow_hint: str = "--allow-host NAME",
) -> Refusal | None:
    """What stops a request before any route (``who`` names the server in the message), or
    ``None`` to let it through: a ``Host`` not in ``hosts`` (421), a foreign ``Origin`` (403), a
    declared body over ``max_body`` bytes (413)."""
    if hosts is not None and host_name(host) not in hosts:
        return Refusal(421, f"{who}: Host {host!r} is not this server's (start it with {allow_hint} "
                            "to answer that name)")
    if origin is not None and not same_origin(origin, host):
        return Refusal(403, f"{who}: requests from origin {origin!r} are refused (this server answers "
                            "its own pages only)")
    if content_length is not None and content_length > max_body:
        return Refusal(413, f"{who}: request body of {content_length} bytes is over the {max_body}-byte limit")
    return None


class HostOriginGuard:
    """ASGI middleware applying :func:`refusal` to every HTTP request, and the body bound to
    bodies sent without a length (chunked): they are read here up to ``max_body`` and handed on,
    or refused (413) once they pass it, so the app never buffers more than the bound."""

    def __init__(self, app: ASGIApp, *, who: str, hosts: frozenset[str] | None, max_body: int,
                 allow_hint: str = "--allow-host NAME") -> None:
        self.app = app
        self.who = who
        self.hosts = hosts
        self.max_body = max_body
        self.allow_hint = allow_hint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {bytes(k).lower(): bytes(v).decode("latin-1") for k, v in scope.get("headers") or ()}
        length = headers.get(b"content-length")
        try:
            declared = int(length) if length is not None else None
        except ValueError:
            await _answer(send, 400, f"{self.who}: Content-Length {length!r} is not a number")
            return
        refused = refusal(who=self.who, host=headers.get(b"host", ""), origin=headers.get(b"origin"),
                          content_length=declared, hosts=self.hosts, max_body=self.max_body,
                          allow_hint=self.allow_hint)
        if refused is not None:
            await _answer(send, refused.status, refused.text)
            return
        if declared is not None:
            await self.app(scope, receive, send)  # the server reads no more than it declared
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            if len(body) > self.max_body:
                await _answer(send, 413, f"{self.who}: request body is over the {self.max_body}-byte limit")
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)


async def _answer(send: Send, status: int, text: str) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": json.dumps({"error": text}).encode()})
