"""The console's gate: the token, the ``Host``/``Origin`` check and the body bound, before any route.

Why each one (DESIGN §9 and §12: every server here has all three):

- **The token.** The API starts and cancels agent trees and reads their conversations, so on an
  address other machines reach it needs a secret (``shelly serve`` refuses to start there without
  one). A request carries it as ``Authorization: Bearer <token>`` or, from the console's page, as
  an ``HttpOnly`` ``SameSite=Strict`` cookie set by ``POST /api/login`` (``EventSource`` cannot
  send headers). The comparison is constant-time. The page and its scripts hold no data and are
  served to anyone, so a browser can show the token form; so is ``/api/health`` (probes).
- **``Host``.** A server on loopback without a token is reachable from a web page through DNS
  rebinding (``evil.example`` re-resolved to ``127.0.0.1``): the browser then sends
  ``Host: evil.example``, which is refused here (421) unless it names this server.
- **``Origin``.** A browser names the page that sent a request; one from another origin (a
  cross-site form post, a script on another site) is refused (403), so a visited page can neither
  start nor cancel work, nor read the API, with the user's cookie.
- **Bodies are bounded** (413) before a handler reads them: a client cannot make the server hold
  an unbounded upload in memory.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from aiohttp import hdrs, web
from yarl import URL

from shelly_dist.tools.mcp.bearer import is_loopback

TOKEN_ENV = "SHELLY_SERVE_TOKEN"
COOKIE = "shelly_console"
MAX_BODY = 256 * 1024
"""Bytes a request body may hold: a task with its context fits many times over."""

PUBLIC_API = frozenset({"/api/health", "/api/login"})
"""The API paths answered without the token (a probe; the login that sets the cookie)."""

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


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


def needs_token(bind: str) -> bool:
    """Whether a server bound to ``bind`` is reachable from other machines (so must have a token):
    anything but a loopback address or ``localhost`` (a wildcard, an address, a name)."""
    return not is_loopback(bind)


@dataclass(frozen=True)
class Gate:
    """What the middleware enforces: the token (``None``: none needed), the accepted ``Host``
    names (``None``: any) and the body bound."""

    token: str | None = None
    hosts: frozenset[str] | None = LOOPBACK_NAMES
    max_body: int = MAX_BODY

    def presented(self, request: web.Request) -> str:
        """The token a request carries: its bearer credentials, else the console's cookie."""
        scheme, _, credentials = request.headers.get(hdrs.AUTHORIZATION, "").partition(" ")
        if scheme.lower() == "bearer" and credentials.strip():
            return credentials.strip()
        return request.cookies.get(COOKIE, "")

    def matches(self, token: str) -> bool:
        """Whether ``token`` is this gate's (constant-time; always true without a token)."""
        return self.token is None or hmac.compare_digest(token.encode(), self.token.encode())

    def refusal(self, request: web.Request) -> web.Response | None:
        """The answer that stops ``request`` here, or ``None`` to let it through."""
        host = request.headers.get(hdrs.HOST, "")
        if self.hosts is not None and host_name(host) not in self.hosts:
            return _error(421, f"serve: Host {host!r} is not this server's (start it with --allow-host NAME "
                               "to answer that name)")
        origin = request.headers.get(hdrs.ORIGIN)
        if origin is not None and not _same_origin(origin, host):
            return _error(403, f"serve: requests from origin {origin!r} are refused (the console answers "
                               "its own pages only)")
        if request.content_length is not None and request.content_length > self.max_body:
            return _error(413, f"serve: request body of {request.content_length} bytes is over the "
                               f"{self.max_body}-byte limit")
        guarded = request.path.startswith("/api/") and request.path not in PUBLIC_API
        if (guarded or request.path.startswith("/mcp")) and not self.matches(self.presented(request)):
            response = _error(401, "serve: unauthorized: send Authorization: Bearer <token> "
                                   f"(the token of {TOKEN_ENV}), or log in on the console's page")
            response.headers[hdrs.WWW_AUTHENTICATE] = 'Bearer realm="shelly"'
            return response
        return None

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        refused = self.refusal(request)
        return refused if refused is not None else await handler(request)


def _same_origin(origin: str, host: str) -> bool:
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


def _error(status: int, text: str) -> web.Response:
    return web.json_response({"error": text}, status=status)
