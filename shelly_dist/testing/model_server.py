"""A mock model server on loopback that speaks the vendors' real wire formats.

It answers ``POST …/chat/completions`` (OpenAI and every compatible server), ``POST …/messages``
(Anthropic) and ``POST …/models/{model}:generateContent`` (Gemini) in each vendor's JSON, chosen by
the request path, records every request, and replies from a script. A request that asks for a
stream (``"stream": true``; Gemini's ``:streamGenerateContent``) gets the same answer as the
vendor's server-sent events (:mod:`shelly_dist.testing.streams`). It runs in a background
thread (a ``ThreadingHTTPServer``, so concurrent requests are served concurrently), or as a
separate process for CLI tests and benchmarks.

In a test::

    with ModelServer() as server:                       # 127.0.0.1, a free port
        server.push(Reply.error(429, retry_after="2"),  # first call: rate-limited
                    Reply(tool_calls=[{"name": "fs_read", "arguments": {"path": "a"}}]),
                    Reply(text="done", usage={"input": 30, "output": 7}))
        completer = create_completer("openai", name="p", model="m", base_url=server.url)
        ...
        server.requests[0].path, server.requests[0].headers["authorization"], server.requests[0].body

- ``server.url`` is the API root to use as ``base_url`` (the client appends ``/v1/…``).
- ``push(*replies)`` queues replies, used one per request in order; when the queue is empty the
  ``default`` reply answers (text ``"ok"`` unless set).
- :class:`Reply` fields: ``text``, ``tool_calls`` (``{"name", "arguments", "id"?,
  "thought_signature"?}``), ``usage`` (``input``, ``output``, ``cache_creation``, ``cache_read``),
  ``status`` + ``body`` + ``retry_after`` for errors (the body defaults to the vendor's error
  JSON), ``malformed`` (a 200 whose body is not JSON), ``raw`` (a JSON answer sent as is),
  ``delay`` (seconds before answering), ``hold_until`` (hold the answer until that many requests
  have arrived in total — proves concurrency without timing), ``release`` (hold it until the test
  sets that ``threading.Event``), ``stream_gate`` (a ``threading.Event``: a streamed answer stops
  after its first piece of text until the test sets it — proves the text was seen before the
  answer ended, without timing), ``stream_cut`` (a streamed answer's connection is closed after
  its first piece of text).
- ``strict_alternation``, ``strict_arguments``, ``prefix_cache`` and ``context_size`` make it
  answer as a real llama-server does (:mod:`shelly_dist.testing.server_rules`): refuse turns that
  do not alternate, 500 on tool-call arguments that are not JSON, count a shared prompt prefix as
  cached tokens, refuse a prompt over the context with llama.cpp's wording. ``Reply.finish_reason
  = "length"`` is an answer the output limit cut; tool-call ``arguments`` given as a string are
  sent as is (``"{"``).
- ``requests`` lists :class:`RecordedRequest` (method, path, lower-cased headers, JSON body,
  ``arrived`` and ``answered`` monotonic times); ``wait_for_requests(n)`` waits with a deadline.
- ``limits=StrictLimits(rpm=…, input_tpm=…)`` makes it a strict vendor
  (:mod:`shelly_dist.testing.strict_limits`): sliding-window limits refused with a 429,
  ``retry-after`` and the vendors' rate-limit headers, which it also sends on every answer;
  ``limits.reject_all(15)`` answers 429 ``retry-after: 15`` to everything for 15 s.
- ``batches`` is the vendors' batch APIs (OpenAI's files and batches, Anthropic's message batches),
  strict as the vendors and answering each batched request like a direct call once the batch has
  ended, ``batch_delay`` seconds after its creation (:mod:`shelly_dist.testing.batch_api`).

As a process (prints ``listening on http://127.0.0.1:PORT`` once ready; stops on SIGTERM)::

    python -m shelly_dist.testing.model_server --port 8765 --latency 0.05 --format openai --text ok
    python -m shelly_dist.testing.model_server --rpm 40 --input-tpm 20000   # a strict vendor
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from shelly_dist.testing import server_rules, streams
from shelly_dist.testing.batch_api import BatchAPIs
from shelly_dist.testing.batch_api import record as batch_record
from shelly_dist.testing.server_rules import PrefixCache
from shelly_dist.testing.strict_limits import StrictLimits, Verdict
from shelly_dist.testing.wire import (
    ANSWERS,
    FORMATS,
    PROBE_PATHS,
    RecordedRequest,
    Reply,
    answer_body,
    error_body,
    format_of,
    speaker,
    streamed,
)

__all__ = ["FORMATS", "ModelServer", "RecordedRequest", "Reply", "answer_body", "error_body", "speaker"]



class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: tests read ``requests`` instead of logs."""

    def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def _stream(self, fmt: str, answer: dict[str, Any], reply: Reply, headers: dict[str, str] | None = None) -> None:
        """``answer`` as the vendor streams it (with ``headers``: a strict key's rate-limit headers);
        the connection closes at its end."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.close_connection = True
        held = False
        for event in streams.EVENTS[fmt](answer):
            self.wfile.write(streams.frame(event))
            self.wfile.flush()
            if not held and streams.is_text(fmt, event):
                held = True
                if reply.stream_cut:
                    return
                if reply.stream_gate is not None:
                    reply.stream_gate.wait(60)

    def do_GET(self) -> None:
        if BatchAPIs.handles(self.path):
            self._batch("GET", b"")
            return
        path = self.path.split("?")[0].rstrip("/")
        self.server.owner.probes.append(path)
        n_ctx = self.server.owner.context_size
        if path == "/props" and n_ctx:  # llama-server: the slot's context
            self._send(200, json.dumps({"default_generation_settings": {"n_ctx": n_ctx}, "total_slots": 1}).encode())
        elif path == "/v1/models":
            entry: dict[str, Any] = {"id": "mock", "object": "model", "owned_by": "llamacpp"}
            if n_ctx:
                entry["meta"] = {"n_ctx": n_ctx}
            self._send(200, json.dumps({"object": "list", "data": [entry]}).encode())
        else:
            self._send(200, b'{"status": "ok"}')

    def _batch(self, method: str, raw: bytes) -> None:
        """A call of a batch endpoint: recorded, answered by ``owner.batches``."""
        owner = self.server.owner
        record = batch_record(method, self.path, {k.lower(): v for k, v in self.headers.items()}, raw)
        owner._record(record)
        try:
            status, payload, ctype = owner.batches.answer(method, self.path, record.headers, raw)
        except Exception as exc:  # a stand-in bug answers 500, naming it, instead of dropping the connection
            status, payload, ctype = 500, json.dumps({"error": f"batch_api: {exc!r}"}).encode(), "application/json"
        record.answered = time.monotonic()
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_POST(self) -> None:
        owner = self.server.owner
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if BatchAPIs.handles(self.path):
            self._batch("POST", raw)
            return
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        record = RecordedRequest(
            method="POST",
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            arrived=time.monotonic(),
            client_port=int(self.client_address[1]) if isinstance(self.client_address, tuple) else 0,
        )
        if self.path.split("?")[0] == "/tokenize" and isinstance(body, dict) and owner.tokenizer:
            count = owner.count(str(body.get("content") or ""))
            self._send(200, json.dumps({"tokens": list(range(count))}).encode())
            return
        path = self.path.split("?")[0]
        fmt = None if path in PROBE_PATHS else format_of(path, owner.format)
        if fmt is None:  # not a model call (a client probing /api/show, say): answered, not counted
            owner.probes.append(path)
            self._send(404, json.dumps({"error": f"mock: unknown path {self.path}"}).encode())
            return
        reply = owner._arrive(record)
        verdict = owner.limits.judge(body, fmt == "anthropic") if owner.limits is not None else Verdict(200)
        if verdict.status != 200:  # a strict vendor's refusal: at once, with its headers
            record.answered = time.monotonic()
            payload = json.dumps(error_body(fmt, verdict.status)).encode()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._send(verdict.status, payload, verdict.headers)
            return
        refusal, prompt = owner._judge(fmt, body)
        if prompt is None and verdict.tokens:  # a strict vendor reports the input it charged
            prompt = (verdict.tokens, 0)
        owner._pause(reply)
        # Stamped before the answer is written: once the client has it, a test may read it.
        record.answered = time.monotonic()
        try:
            if refusal is not None:
                self._send(refusal[0], json.dumps(refusal[1]).encode())
            elif reply.malformed:
                self._send(200, b'{"choices": [ this is not json')
            elif reply.status != 200:
                text = reply.body if reply.body is not None else json.dumps(error_body(fmt, reply.status))
                self._send(
                    reply.status,
                    text.encode(),
                    {"Retry-After": reply.retry_after} if reply.retry_after else None,
                )
            else:
                model = str((body or {}).get("model") or "mock") if isinstance(body, dict) else "mock"
                payload = reply.raw if reply.raw is not None else ANSWERS[fmt](reply, model, prompt)
                if owner.timings and fmt == "openai" and isinstance(payload, dict):
                    payload["timings"] = owner.timings_of(payload)
                if streamed(self.path, body):
                    self._stream(fmt, payload, reply, verdict.headers)
                else:
                    self._send(200, json.dumps(payload).encode(), verdict.headers)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test); nothing to answer


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 1024
    """Listen backlog: the default (5) drops connections when hundreds of agents call at once."""
    owner: ModelServer


class ModelServer:
    """The mock server (see the module docstring). Use as a context manager, or ``start``/``stop``."""

    def __init__(
        self,
        *,
        default: Reply | None = None,
        format: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        latency: float = 0.0,
        responder: Callable[[RecordedRequest], Reply | None] | None = None,
        strict_alternation: bool = False,
        strict_arguments: bool = False,
        prefix_cache: bool = False,
        context_size: int = 0,
        batch_delay: float = 0.5,
        token_ratio: float = 1.0,
        timings: bool = False,
        tokenizer: bool = True,
        limits: StrictLimits | None = None,
    ) -> None:
        if format is not None and format not in FORMATS:
            raise ValueError(f"model_server: unknown format {format!r} (one of {', '.join(FORMATS)})")
        self.default = default or Reply()
        self.format = format
        self.latency = latency
        self.responder = responder
        """Chooses the reply from the request itself (concurrent agents in one test); ``None`` from
        it falls back to the queue and the default."""
        self.strict_alternation = strict_alternation
        """Refuse user/assistant turns that do not alternate, as strict chat templates do."""
        self.strict_arguments = strict_arguments
        """Answer 500 when a tool call in the history has arguments that are not JSON (llama-server)."""
        self.prefix_cache = PrefixCache() if prefix_cache else None
        """Count the longest prefix shared with an earlier prompt as cached (llama.cpp, vLLM): the
        OpenAI answers' usage then comes from it unless the reply sets ``input``."""
        self.context_size = context_size
        """A prompt of more tokens than this is refused as llama.cpp does (0: no limit)."""
        self.batches = BatchAPIs(self, batch_delay)
        """The batch endpoints' state: batches, answered lines, submissions per ``custom_id``."""
        """A prompt of more tokens than this is refused as llama.cpp does (0: no limit); it is also
        the window ``/props`` and ``/v1/models`` say, as llama-server's do."""
        self.token_ratio = token_ratio
        """This server's tokens per characters/4: 1.65 counts as llama.cpp's tokenizer counted
        German text, 7.9 Chinese (measured with a real llama-server's ``/tokenize``)."""
        self.timings = timings
        self.tokenizer = tokenizer
        """Answer ``POST /tokenize`` as llama-server does (``False``: a server without one)."""
        self.probes: list[str] = []
        """Paths asked that are not model calls, in order (a client reading ``/props`` or
        ``/v1/models``, or trying Ollama's ``/api/show``): not in :attr:`requests`."""
        """Add llama-server's ``timings`` (prompt and generation tokens per second) to answers."""
        self.limits = limits
        """A strict vendor's rate limits (:mod:`shelly_dist.testing.strict_limits`), or none."""
        self._host, self._port = host, port
        self._queue: deque[Reply] = deque()
        self._requests: list[RecordedRequest] = []
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The API root (``http://127.0.0.1:PORT``), to use as a provider's ``base_url``."""
        if self._httpd is None:
            raise RuntimeError("model_server: not started")
        return f"http://{self._host}:{self._httpd.server_address[1]}"

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def push(self, *replies: Reply) -> None:
        """Queue replies, answered one per request in order before the default reply."""
        with self._cond:
            self._queue.extend(replies)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of the requests received so far, in arrival order."""
        with self._cond:
            return list(self._requests)

    def wait_for_requests(self, n: int, timeout: float = 10.0) -> list[RecordedRequest]:
        """Block until ``n`` requests have arrived (``TimeoutError`` after ``timeout`` seconds)."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._requests) >= n, timeout):
                raise TimeoutError(f"model_server: {len(self._requests)} of {n} requests after {timeout}s")
            return list(self._requests)

    def _arrive(self, record: RecordedRequest) -> Reply:
        with self._cond:
            self._record(record)
            return self._choose(record)

    def _record(self, record: RecordedRequest) -> None:
        with self._cond:
            self._requests.append(record)
            self._cond.notify_all()

    def _choose(self, record: RecordedRequest) -> Reply:
        """The reply to ``record``: the responder's, else the next queued one, else the default."""
        with self._cond:
            chosen = self.responder(record) if self.responder is not None else None
            if chosen is not None:
                return chosen
            return self._queue.popleft() if self._queue else self.default

    def _judge(self, fmt: str | None, body: Any) -> tuple[tuple[int, dict[str, Any]] | None, tuple[int, int] | None]:
        """The refusal a real OpenAI-compatible server would answer ``body`` with (or ``None``), and
        the prompt's ``(prompt_tokens, cached_tokens)`` when the server counts them itself. The
        rules (:mod:`shelly_dist.testing.server_rules`) apply to the OpenAI format only."""
        if fmt != "openai" or not isinstance(body, dict):
            return None, None
        if self.strict_alternation and (refusal := server_rules.alternation_error(body)):
            return refusal, None
        if self.strict_arguments and (refusal := server_rules.arguments_error(body)):
            return refusal, None
        if not (self.prefix_cache or self.context_size):
            return None, None
        prompt = server_rules.render(body)
        size = self.count(prompt)
        if self.context_size and size > self.context_size:
            return server_rules.overflow_error(size, self.context_size), None
        if self.prefix_cache is None:
            return None, (size, 0)  # the server counts the prompt itself
        _, cached = self.prefix_cache.evaluate(prompt)
        return None, (size, math.ceil(cached * self.token_ratio))

    def count(self, text: str) -> int:
        """``text`` in this server's tokens (what ``/tokenize`` answers)."""
        return math.ceil(server_rules.tokens(text) * self.token_ratio)

    def timings_of(self, payload: dict[str, Any]) -> dict[str, Any]:
        """llama-server's ``timings`` for an answer: fixed speeds, so tests can read them."""
        usage = payload.get("usage") or {}
        return {"cache_n": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
                "prompt_n": usage.get("prompt_tokens", 0), "prompt_ms": 10.0, "prompt_per_second": 850.0,
                "predicted_n": usage.get("completion_tokens", 0), "predicted_ms": 100.0,
                "predicted_per_second": 42.0}

    def _pause(self, reply: Reply) -> None:
        if reply.hold_until:
            with self._cond:
                self._cond.wait_for(
                    lambda: len(self._requests) >= reply.hold_until or self._stopping.is_set(), 10.0
                )
        while reply.release is not None and not reply.release.wait(0.05) and not self._stopping.is_set():
            pass
        wait = self.latency + reply.delay
        if wait > 0:
            self._stopping.wait(wait)

    def start(self) -> ModelServer:
        self._httpd = _Server((self._host, self._port), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), name="model-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; requests still waiting on a delay are released at once."""
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    """Serve until SIGTERM/SIGINT, answering every request with ``--text`` after ``--latency``."""
    parser = argparse.ArgumentParser(prog="python -m shelly_dist.testing.model_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--format", choices=FORMATS, default=None, help="format for unrecognised paths")
    parser.add_argument("--text", default="ok", help="the text of every answer")
    parser.add_argument("--prefix-cache", action="store_true", help="count a shared prompt prefix as cached")
    parser.add_argument("--rpm", type=int, default=0, help="refuse past this many requests per minute (429)")
    parser.add_argument("--input-tpm", type=int, default=0, help="refuse past this many input tokens per minute")
    parser.add_argument("--reject-for", type=float, default=0.0,
                        help="answer 429 with this retry-after to everything for this long from the start")
    args = parser.parse_args(argv)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    server = ModelServer(
        default=Reply(text=args.text),
        format=args.format,
        host=args.host,
        port=args.port,
        latency=args.latency,
        prefix_cache=args.prefix_cache,
        limits=StrictLimits(rpm=args.rpm, input_tpm=args.input_tpm) if args.rpm or args.input_tpm or args.reject_for
        else None,
    )
    if args.reject_for and server.limits is not None:
        server.limits.reject_all(args.reject_for)
    with server:
        print(f"listening on {server.url}", flush=True)
        done.wait()


if __name__ == "__main__":
    main()
