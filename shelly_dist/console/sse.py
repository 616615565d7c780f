"""Server-Sent Events: one ``data:`` line of JSON per event, an ``id:`` per event, keep-alives.

The stream never ends on its own (a browser's ``EventSource`` would reconnect anyway): it lasts
until the client goes. A comment line (``: keep-alive``) is written whenever no event came for
``keepalive`` seconds, so proxies keep the connection open and a client that left is noticed
(the write fails) even when its session is quiet. A client that reconnects sends the last ``id``
it got as ``Last-Event-ID`` and the backend resumes after it. The events are read by a task of
their own into a bounded queue, so a slow client holds back only its own reader.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

from aiohttp import web

from shelly_dist.events import Event

KEEPALIVE = 15.0
"""Seconds without an event after which a keep-alive comment is written."""
RETRY_MS = 2000
"""How long a browser waits before reconnecting a dropped stream (the ``retry:`` field)."""
QUEUE = 1000
"""Events read ahead for one client before its reader waits for the client."""


def frame(event_id: str, event: Event) -> bytes:
    """One SSE message: the id, and the event as one line of JSON."""
    data = json.dumps(event.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":"))
    return f"id: {event_id}\ndata: {data}\n\n".encode()


async def stream(request: web.Request, events: AsyncIterator[tuple[str, Event]], *,
                 keepalive: float = KEEPALIVE) -> web.StreamResponse:
    """Answer ``request`` with ``events`` as an event stream until the client disconnects."""
    response = web.StreamResponse(headers={
        "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache",
        "X-Accel-Buffering": "no",  # nginx and others: do not buffer the stream
    })
    await response.prepare(request)
    await response.write(f"retry: {RETRY_MS}\n\n".encode())
    queue: asyncio.Queue[tuple[str, Event]] = asyncio.Queue(QUEUE)

    async def read() -> None:
        async for item in events:
            await queue.put(item)

    reader = asyncio.ensure_future(read())
    try:
        while True:
            get = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait({get, reader}, timeout=keepalive, return_when=asyncio.FIRST_COMPLETED)
            if get in done:
                await response.write(frame(*get.result()))
                continue
            get.cancel()
            if reader in done:
                reader.result()  # the reader failed: its error ends the stream (and is logged)
                break
            await response.write(b": keep-alive\n\n")
    except ConnectionResetError:  # the client went away
        pass
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader
    return response
