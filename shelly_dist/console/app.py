"""``shelly serve``'s server: the routes behind the gate, on one listening socket, until cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from shelly_dist.console.backend import Backend
from shelly_dist.console.gate import Gate
from shelly_dist.console.routes import BACKEND, GATE, KEEPALIVE, errors, routes
from shelly_dist.console.sse import KEEPALIVE as DEFAULT_KEEPALIVE
from shelly_dist.tools.mcp.server import listen

SHUTDOWN_TIMEOUT = 5.0
"""Seconds open requests (event streams) get to end when the server stops."""


def build_app(backend: Backend, gate: Gate, *, keepalive: float = DEFAULT_KEEPALIVE) -> web.Application:
    """The application: the gate first (nothing passes it unchecked), then JSON errors, then routes."""
    app = web.Application(middlewares=[gate.middleware, errors], client_max_size=gate.max_body)
    app[BACKEND] = backend
    app[GATE] = gate
    app[KEEPALIVE] = keepalive
    app.add_routes(routes)
    return app


def url_of(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("", "0.0.0.0") else ("::1" if host == "::" else host)
    return f"http://{'[' + shown + ']' if ':' in shown else shown}:{port}/"


async def serve(app: web.Application, *, host: str, port: int,
                on_listening: Callable[[str], None] | None = None) -> None:
    """Serve ``app`` on ``host:port`` (``port`` 0 picks a free one) until cancelled; the socket
    listens before ``on_listening(url)`` is called. A client that disconnects cancels its handler
    (an event stream stops reading at once)."""
    sock = listen(host, port)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT)
    try:
        await runner.setup()
        await web.SockSite(runner, sock, shutdown_timeout=SHUTDOWN_TIMEOUT).start()
        if on_listening is not None:
            on_listening(url_of(host, int(sock.getsockname()[1])))
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
        sock.close()
