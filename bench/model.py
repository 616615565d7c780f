"""A fast loopback model for the benchmarks: asyncio, OpenAI wire format, a fixed latency.

The test suite's :mod:`shelly_dist.testing.model_server` is a ``ThreadingHTTPServer``: one thread
per connection, started by a single accept loop. Hundreds of simultaneous calls then queue behind
thread start-up and the GIL (500 calls at 1 s latency took ~2.4 s on the bench machine), which
would be charged to the runtime under test. This server holds every connection as a coroutine, so
the model's own contribution stays close to its configured latency. It answers every
``POST …/chat/completions`` with the same text reply (a ``POST`` whose path holds ``stream`` gets
it as server-sent events instead: :data:`STREAM_EVENTS` chunks, then ``[DONE]``); ``GET /stats``
returns the requests received and the number being held right now (``{"requests": N,
"inflight": M}``). With ``--hold`` every request waits until ``GET /release`` instead of a
latency (memory measured with N calls in flight, however long it takes to get them all there). It runs as a subprocess::

    python -m bench.model --port P --latency 1.0
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time

_HEADER_END = b"\r\n\r\n"
STREAM_EVENTS = 20
"""Events of a streamed answer (one token each), written as separate chunks after the latency."""
STREAM_GAP = 0.005
"""Seconds between two streamed events, so a client reads them one by one as from a real model."""


def _response(body: bytes) -> bytes:
    head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: keep-alive\r\n\r\n").encode()
    return head + body


def _stats(requests: int, inflight: int) -> bytes:
    return _response(json.dumps({"requests": requests, "inflight": inflight}).encode())


def _answer(text: str) -> bytes:
    return _response(json.dumps({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": int(time.time()), "model": "bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
    }).encode())


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


_STREAM_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                b"Connection: keep-alive\r\n\r\n")
_STREAM_EVENT = _chunk(b'data: {"choices":[{"index":0,"delta":{"content":"t"}}]}\n\n')
_STREAM_END = _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


async def _stream(writer: asyncio.StreamWriter) -> None:
    """A streamed answer: :data:`STREAM_EVENTS` events, :data:`STREAM_GAP` apart, then ``[DONE]``."""
    writer.write(_STREAM_HEAD)
    for _ in range(STREAM_EVENTS):
        writer.write(_STREAM_EVENT)
        await writer.drain()
        await asyncio.sleep(STREAM_GAP)
    writer.write(_STREAM_END)
    await writer.drain()


class FastModel:
    """Answers every request with ``text`` after ``latency`` seconds; counts requests."""

    def __init__(self, latency: float, text: str = "ok", *, hold: bool = False) -> None:
        self.latency = latency
        self.hold = hold
        self.gate = asyncio.Event()
        self.reply = _answer(text)
        self.requests = 0
        self.inflight = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(_HEADER_END)
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                if length:
                    await reader.readexactly(length)
                if head.startswith(b"GET /"):
                    if head.startswith(b"GET /release"):
                        self.gate.set()
                        self.gate = asyncio.Event()
                    writer.write(_stats(self.requests, self.inflight))
                    await writer.drain()
                    continue
                self.requests += 1
                self.inflight += 1
                try:
                    if self.hold:
                        await self.gate.wait()
                    elif self.latency > 0:
                        await asyncio.sleep(self.latency)
                finally:
                    self.inflight -= 1
                if b"stream" in head.split(b" ", 2)[1]:
                    await _stream(writer)
                    continue
                writer.write(self.reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()


async def serve(host: str, port: int, latency: float, text: str, hold: bool) -> None:
    model = FastModel(latency, text, hold=hold)
    server = await asyncio.start_server(model.handle, host, port, backlog=4096, limit=1 << 22)
    bound = server.sockets[0].getsockname()[1]
    print(f"listening on http://{host}:{bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--text", default="ok")
    parser.add_argument("--hold", action="store_true", help="hold every request until GET /release")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.host, args.port, args.latency, args.text, args.hold))


if __name__ == "__main__":
    main()
