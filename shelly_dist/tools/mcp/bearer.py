"""A static bearer token in front of the MCP HTTP app: every request must carry it.

Why: ``shelly mcp serve`` exposes the project's tools (exec, filesystem, git, the agents), so an
HTTP listener reachable from other machines is remote code execution for whoever finds the port.
On a non-loopback address the CLI refuses to start without a token; with one, this middleware
answers 401 to any request whose ``Authorization`` header is not ``Bearer <token>`` — before the
MCP app sees it, on every request, not only the first of a session. The comparison is
constant-time. Lifespan events pass through untouched.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_UNAUTHORIZED = b'{"error":"unauthorized: send Authorization: Bearer <token>"}'


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) only accepts connections from this machine."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def _presented(scope: Scope) -> bytes:
    for name, value in scope.get("headers") or ():
        if name.lower() == b"authorization":
            scheme, _, credentials = bytes(value).partition(b" ")
            return credentials.strip() if scheme.lower() == b"bearer" else b""
    return b""


class BearerTokenAuth:
    """ASGI middleware: 401 unless the request carries ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        if not token:
            raise ValueError("mcp: a bearer token must not be empty")
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not hmac.compare_digest(_presented(scope), self._token):
            await send({
                "type": "http.response.start",
                "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b'Bearer realm="shelly"')],
            })
            await send({"type": "http.response.body", "body": _UNAUTHORIZED})
            return
        await self.app(scope, receive, send)
