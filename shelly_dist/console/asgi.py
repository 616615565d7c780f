"""An ASGI application served under a path of the console's aiohttp server (the MCP SDK's
streamable HTTP app under ``/mcp``): one port, one gate, one token for everything.

Each request becomes an ASGI ``http`` scope (path and headers as received, the body streamed in
``http.request`` messages), and the app's ``http.response.*`` messages become a streamed aiohttp
response, so a long-lived answer (an SSE stream) flows as it is written. The app's lifespan runs
with the server's: started before the first request, shut down when the server stops. The gate's
checks (token, ``Host``, ``Origin``, body bound) have run before a request gets here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

from aiohttp import web

Message = MutableMapping[str, Any]
ASGIApp = Callable[[MutableMapping[str, Any], Callable[[], Awaitable[Message]],
                    Callable[[Message], Awaitable[None]]], Awaitable[None]]

CHUNK = 64 * 1024


def mount(app: web.Application, prefix: str, asgi: ASGIApp) -> None:
    """Serve ``asgi`` for ``prefix`` and everything under it, with its lifespan tied to ``app``'s."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return await _serve(request, asgi)

    app.router.add_route("*", prefix, handler)
    app.router.add_route("*", prefix + "/{tail:.*}", handler)
    app.cleanup_ctx.append(lambda _app: _lifespan(asgi))


async def _lifespan(asgi: ASGIApp) -> AsyncIterator[None]:
    """Run the app's lifespan protocol: ``startup`` before yielding, ``shutdown`` after."""
    inbox: asyncio.Queue[Message] = asyncio.Queue()
    started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    stopped: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def send(message: Message) -> None:
        kind = message["type"]
        target = started if kind.startswith("lifespan.startup") else stopped
        if not target.done():
            if kind.endswith(".failed"):
                target.set_exception(RuntimeError(f"serve: mounted app: {message.get('message', kind)}"))
            else:
                target.set_result(None)

    await inbox.put({"type": "lifespan.startup"})
    task = asyncio.ensure_future(asgi({"type": "lifespan", "asgi": {"version": "3.0"}}, inbox.get, send))
    try:
        await started
        yield
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(stopped), 10)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def _serve(request: web.Request, asgi: ASGIApp) -> web.StreamResponse:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    sock = request.transport.get_extra_info("sockname") if request.transport else None
    scope: dict[str, Any] = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}", "method": request.method,
        "scheme": request.scheme, "path": request.path, "raw_path": request.raw_path.split("?")[0].encode(),
        "query_string": request.query_string.encode(), "root_path": "",
        "headers": [(k.lower(), v) for k, v in request.raw_headers],
        "client": tuple(peer[:2]) if peer else None, "server": tuple(sock[:2]) if sock else None,
    }
    response: web.StreamResponse | None = None
    body_done = False

    async def receive() -> Message:
        nonlocal body_done
        if not body_done:
            chunk = await request.content.read(CHUNK)
            body_done = request.content.at_eof()
            return {"type": "http.request", "body": chunk, "more_body": not body_done}
        await asyncio.Event().wait()  # nothing more until the client goes: the handler is cancelled
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal response
        if message["type"] == "http.response.start":
            response = web.StreamResponse(status=message["status"])
            for name, value in message.get("headers", []):
                response.headers.add(name.decode("latin-1"), value.decode("latin-1"))
            response.headers.popall("Content-Length", None)  # streamed: aiohttp frames it
            await response.prepare(request)
        elif message["type"] == "http.response.body" and response is not None:
            if message.get("body"):
                await response.write(message["body"])
            if not message.get("more_body", False):
                await response.write_eof()

    await asgi(scope, receive, send)
    if response is None:
        return web.Response(status=500, text="serve: the mounted app sent no response")
    return response
