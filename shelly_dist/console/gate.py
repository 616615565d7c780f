"""The console's gate: the token, the ``Host``/``Origin`` check and the body bound, before any route.

Why each one (DESIGN §9 and §12: every server here has all three):

- **The token.** The API starts and cancels agent trees and reads their conversations, so on an
  address other machines reach it needs a secret (``shelly serve`` refuses to start there without
  one). A request carries it as ``Authorization: Bearer <token>`` or, from the console's page, as
  an ``HttpOnly`` ``SameSite=Strict`` cookie set by ``POST /api/login`` (``EventSource`` cannot
  send headers). The comparison is constant-time. The page and its scripts hold no data and are
  served to anyone, so a browser can show the token form; so is ``/api/health`` (probes).
The ``Host``/``Origin`` check and the body bound are :mod:`shelly_dist.tools.mcp.hostcheck`'s,
shared with ``shelly a2a serve``.

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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import hdrs, web

from shelly_dist.tools.mcp.bearer import is_loopback
from shelly_dist.tools.mcp.hostcheck import LOOPBACK_NAMES, allowed_hosts, host_name, refusal

__all__ = ["COOKIE", "LOOPBACK_NAMES", "MAX_BODY", "Gate", "allowed_hosts", "host_name", "needs_token"]

TOKEN_ENV = "SHELLY_SERVE_TOKEN"
COOKIE = "shelly_console"
MAX_BODY = 256 * 1024
"""Bytes a request body may hold: a task with its context fits many times over."""

PUBLIC_API = frozenset({"/api/health", "/api/login"})
"""The API paths answered without the token (a probe; the login that sets the cookie)."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


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
        refused = refusal(who="serve", host=request.headers.get(hdrs.HOST, ""),
                          origin=request.headers.get(hdrs.ORIGIN), content_length=request.content_length,
                          hosts=self.hosts, max_body=self.max_body)
        if refused is not None:
            return _error(refused.status, refused.text)
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


def _error(status: int, text: str) -> web.Response:
    return web.json_response({"error": text}, status=status)
