"""The batch endpoints of the loopback model server: OpenAI's Batch API and Anthropic's Message
Batches, strict about what the vendors refuse, completing after a delay.

:class:`~shelly_dist.testing.model_server.ModelServer` routes these paths here (``server.batches``):

- OpenAI — ``POST /v1/files`` (multipart: ``purpose=batch`` and a ``file`` of JSONL lines),
  ``POST /v1/batches`` (``input_file_id``, ``endpoint``, ``completion_window: 24h``),
  ``GET /v1/batches`` (newest first, ``limit``/``after``), ``GET /v1/batches/{id}``,
  ``POST /v1/batches/{id}/cancel``, ``GET /v1/files/{id}/content`` (output and error files);
- Anthropic — ``POST /v1/messages/batches`` (``requests: [{custom_id, params}]``),
  ``GET /v1/messages/batches`` (newest first), ``GET /v1/messages/batches/{id}``,
  ``GET …/{id}/results`` (JSONL), ``POST …/{id}/cancel``.

Refused as the vendors refuse them: a request without the vendor's key header (401); an OpenAI
upload whose purpose is not ``batch``, a batch whose ``endpoint`` or ``completion_window`` is not
one OpenAI takes, or whose input file is unknown (400/404); an input file with a line that is not
JSON, has no ``custom_id`` or one used earlier in the file, a ``url`` other than the batch's
endpoint, a method other than ``POST``, no ``body``, or a model other than the first line's — the
batch is then created and ``failed`` with OpenAI's ``errors`` list; an Anthropic batch with no
requests, a ``custom_id`` missing, repeated or outside ``^[a-zA-Z0-9_-]{1,64}$``, or ``params``
without ``model``, ``max_tokens`` and ``messages`` (400, nothing created). Results are read only
once a batch has ended.

A batch is ``in_progress`` until ``delay`` seconds after its creation (``ModelServer(batch_delay=…)``)
and while :meth:`BatchAPIs.hold` holds it; at its first look after that it ends, and each of its
requests is answered as a direct call would be — the server's responder, queued replies or default
(``Reply.batch_state`` = ``errored``/``expired`` makes that line fail so). Each answered line is
recorded in ``lines`` (not in ``server.requests``, which holds the HTTP calls), and every
``custom_id`` a created batch holds is counted in ``submitted`` — a request that reached the vendor
twice counts 2. :meth:`BatchAPIs.fail` makes an endpoint answer an error status.
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import re
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from shelly_dist.testing.wire import RecordedRequest, Reply, answer_body, error_body


class BatchHost(Protocol):
    """What the batch APIs use of the server they are part of (``ModelServer`` is one): its
    address, its record of HTTP calls, and how it chooses a reply."""

    requests: list[RecordedRequest]

    @property
    def url(self) -> str: ...

    def _choose(self, record: RecordedRequest) -> Reply: ...


OPENAI_ENDPOINTS = ("/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/v1/completions")
CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
OPS = ("upload", "create", "list", "poll", "results", "cancel")
"""What :meth:`BatchAPIs.fail` can make fail."""

BATCH_HEADER = "x-stand-in-batch"
"""The header a batched request carries when the server's responder chooses its reply: the batch's id
(a direct call never has it)."""

Answer = tuple[int, bytes, str]
"""(status, body, content type)."""


@dataclass
class BatchLine:
    """One request of a batch, as the stand-in answered it."""

    vendor: str
    batch_id: str
    custom_id: str
    body: dict[str, Any]
    state: str = ""
    """``succeeded``, ``errored``, ``expired`` or ``canceled``."""


@dataclass
class _Batch:
    vendor: str
    id: str
    lines: list[tuple[str, dict[str, Any]]]
    created: float
    due: float
    endpoint: str = ""
    input_file_id: str = ""
    errors: list[dict[str, Any]] = field(default_factory=list)
    status: str = "in_progress"
    canceled: bool = False
    results: list[dict[str, Any]] = field(default_factory=list)
    output_file_id: str = ""
    error_file_id: str = ""
    ended_at: float = 0.0


def _json(status: int, payload: Any) -> Answer:
    return status, json.dumps(payload).encode(), "application/json"


def _openai_error(status: int, message: str, code: str = "invalid_request_error") -> Answer:
    return _json(status, {"error": {"message": message, "type": "invalid_request_error", "code": code}})


def _anthropic_error(status: int, message: str, kind: str = "invalid_request_error") -> Answer:
    return _json(status, {"type": "error", "error": {"type": kind, "message": message}})


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


class BatchAPIs:
    """The batch state of one model server. Thread-safe (the server answers concurrently)."""

    def __init__(self, server: BatchHost, delay: float) -> None:
        self.server = server
        self.delay = delay
        self.lines: list[BatchLine] = []
        self.submitted: Counter[str] = Counter()
        """How many created batches held each ``custom_id`` (1 each, unless one was submitted twice)."""
        self._lock = threading.RLock()
        self._files: dict[str, tuple[str, bytes]] = {}
        self._batches: dict[str, _Batch] = {}
        self._held = False
        self._failing: dict[str, list[int | None]] = {}
        self._stalled: dict[str, threading.Event] = {}

    # -- what tests use -------------------------------------------------------------------------

    def hold(self) -> None:
        """Keep every batch in progress, whatever its delay, until :meth:`release`."""
        with self._lock:
            self._held = True

    def release(self) -> None:
        with self._lock:
            self._held = False

    def fail(self, op: str, status: int = 500, times: int | None = None) -> None:
        """Make ``op`` (one of :data:`OPS`) answer ``status``: ``times`` times, or always (``None``)."""
        if op not in OPS:
            raise ValueError(f"batch_api: unknown op {op!r} (one of {', '.join(OPS)})")
        with self._lock:
            self._failing[op] = [status, times]

    def stall(self, op: str) -> None:
        """Do what ``op`` asks but withhold the answer until :meth:`unstall` (at most 120 s): a
        caller that dies meanwhile never learns, say, the id of the batch it created."""
        if op not in OPS:
            raise ValueError(f"batch_api: unknown op {op!r} (one of {', '.join(OPS)})")
        with self._lock:
            self._stalled[op] = threading.Event()

    def unstall(self, op: str) -> None:
        with self._lock:
            found = self._stalled.pop(op, None)
        if found is not None:
            found.set()

    def batches(self, vendor: str | None = None) -> list[dict[str, Any]]:
        """Every batch created so far, oldest first: ``{id, vendor, status, requests, canceled}``."""
        with self._lock:
            return [{"id": b.id, "vendor": b.vendor, "status": b.status, "requests": len(b.lines),
                     "canceled": b.canceled} for b in self._batches.values() if vendor in (None, b.vendor)]

    def wait_for_batches(self, n: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Block until ``n`` batches exist (``TimeoutError`` after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(found := self.batches()) >= n:
                return found
            time.sleep(0.02)
        raise TimeoutError(f"batch_api: {len(self.batches())} of {n} batches after {timeout}s")

    # -- routing --------------------------------------------------------------------------------

    @staticmethod
    def handles(path: str) -> bool:
        path = urlsplit(path).path
        return path.startswith(("/v1/files", "/v1/batches", "/v1/messages/batches"))

    def answer(self, method: str, target: str, headers: dict[str, str], raw: bytes) -> Answer:
        parts = urlsplit(target)
        path, query = parts.path.rstrip("/"), parse_qs(parts.query)
        anthropic = path.startswith("/v1/messages/batches")
        if anthropic and not headers.get("x-api-key"):
            return _anthropic_error(401, "x-api-key header is required", "authentication_error")
        if not anthropic and not headers.get("authorization", "").startswith("Bearer "):
            return _openai_error(401, "You didn't provide an API key.", "invalid_api_key")
        op = self._op(method, path)
        if op is None:
            return _json(404, {"error": f"batch_api: no route {method} {path}"})
        if (failure := self._failure(op)) is not None:
            return _anthropic_error(failure, f"stand-in {op} failure", "api_error") if anthropic \
                else _openai_error(failure, f"stand-in {op} failure", "server_error")
        with self._lock:
            if anthropic:
                answer = self._anthropic(method, path, query, raw)
            else:
                answer = self._openai(method, path, query, headers, raw)
            stalled = self._stalled.get(op)
        if stalled is not None:
            stalled.wait(120)
        return answer

    @staticmethod
    def _op(method: str, path: str) -> str | None:
        segments = path.split("/")
        if method == "POST" and path in ("/v1/files",):
            return "upload"
        if method == "POST" and path in ("/v1/batches", "/v1/messages/batches"):
            return "create"
        if method == "POST" and path.endswith("/cancel"):
            return "cancel"
        if method == "GET" and path in ("/v1/batches", "/v1/messages/batches"):
            return "list"
        if method == "GET" and (path.endswith("/content") or path.endswith("/results")):
            return "results"
        if method == "GET" and len(segments) == 4 and segments[2] == "batches":
            return "poll"
        if method == "GET" and len(segments) == 5 and segments[2:4] == ["messages", "batches"]:
            return "poll"
        return None

    def _failure(self, op: str) -> int | None:
        with self._lock:
            failing = self._failing.get(op)
            if failing is None:
                return None
            status, times = failing
            if times is not None:
                if times <= 0:
                    return None
                failing[1] = times - 1
            return status

    # -- OpenAI ---------------------------------------------------------------------------------

    def _openai(self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str],
                raw: bytes) -> Answer:
        if path == "/v1/files":
            return self._upload(headers, raw)
        if path.startswith("/v1/files/") and path.endswith("/content"):
            found = self._files.get(path.split("/")[3])
            return (200, found[1], "application/jsonl") if found else _openai_error(404, "No such File object")
        if path == "/v1/batches" and method == "POST":
            return self._openai_create(raw)
        if path == "/v1/batches":
            return self._openai_list(query)
        batch = self._batches.get(path.split("/")[3])
        if batch is None or batch.vendor != "openai":
            return _openai_error(404, f"No batch found with id '{path.split('/')[3]}'.")
        if path.endswith("/cancel"):
            if batch.status in ("in_progress", "validating", "finalizing"):
                batch.canceled = True
        return _json(200, self._openai_view(self._look(batch)))

    def _upload(self, headers: dict[str, str], raw: bytes) -> Answer:
        ctype = headers.get("content-type", "")
        if not ctype.startswith("multipart/form-data"):
            return _openai_error(400, "Expected a multipart/form-data upload")
        head = f"Content-Type: {ctype}\r\n\r\n".encode()
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + raw)
        fields: dict[str, tuple[str, bytes]] = {}
        for part in message.iter_parts() if message.is_multipart() else []:  # type: ignore[attr-defined]
            name = part.get_param("name", header="content-disposition")
            fields[str(name)] = (str(part.get_filename() or ""), part.get_payload(decode=True) or b"")
        purpose = fields.get("purpose", ("", b""))[1].decode()
        if "file" not in fields:
            return _openai_error(400, "Missing required parameter: 'file'.")
        if purpose != "batch":
            return _openai_error(400, f"Invalid value for purpose: {purpose!r}; this stand-in takes 'batch'.")
        file_id = f"file-{uuid.uuid4().hex[:24]}"
        self._files[file_id] = ("batch", fields["file"][1])
        return _json(200, {"id": file_id, "object": "file", "bytes": len(fields["file"][1]),
                           "created_at": int(time.time()), "filename": fields["file"][0], "purpose": "batch"})

    def _openai_create(self, raw: bytes) -> Answer:
        try:
            body = json.loads(raw)
        except ValueError:
            return _openai_error(400, "We could not parse the JSON body of your request.")
        endpoint, window = body.get("endpoint"), body.get("completion_window")
        if endpoint not in OPENAI_ENDPOINTS:
            return _openai_error(400, f"Invalid value for endpoint: {endpoint!r}.")
        if window != "24h":
            return _openai_error(400, f"Invalid value for completion_window: {window!r}; supported: '24h'.")
        found = self._files.get(str(body.get("input_file_id")))
        if found is None:
            return _openai_error(404, f"No such File object: {body.get('input_file_id')}")
        lines, errors = self._validate_jsonl(found[1], str(endpoint))
        now = time.time()
        batch = _Batch("openai", f"batch_{uuid.uuid4().hex[:24]}", lines, now, now + self.delay,
                       endpoint=str(endpoint), input_file_id=str(body["input_file_id"]), errors=errors)
        if errors:
            batch.status, batch.ended_at = "failed", now
        else:
            self._count(batch)
        self._batches[batch.id] = batch
        return _json(200, self._openai_view(batch))

    def _validate_jsonl(self, data: bytes, endpoint: str) -> tuple[list[tuple[str, dict[str, Any]]], list[dict]]:
        lines: list[tuple[str, dict[str, Any]]] = []
        errors: list[dict[str, Any]] = []
        seen: set[str] = set()
        model = None

        def bad(n: int, code: str, message: str) -> None:
            errors.append({"code": code, "message": message, "param": None, "line": n})

        for n, text in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            if not text.strip():
                continue
            try:
                item = json.loads(text)
            except ValueError:
                bad(n, "invalid_json_line", "This line is not parseable as valid JSON.")
                continue
            custom_id = item.get("custom_id") if isinstance(item, dict) else None
            if not isinstance(custom_id, str) or not custom_id:
                bad(n, "missing_required_parameter", "Missing required parameter: 'custom_id'.")
            elif custom_id in seen:
                bad(n, "duplicate_custom_id", f"The custom_id '{custom_id}' is used more than once in this file.")
            elif item.get("method") != "POST":
                bad(n, "invalid_method", "The method must be 'POST'.")
            elif item.get("url") != endpoint:
                bad(n, "invalid_url", f"The url must match the batch's endpoint '{endpoint}'.")
            elif not isinstance(item.get("body"), dict):
                bad(n, "missing_required_parameter", "Missing required parameter: 'body'.")
            elif model is not None and item["body"].get("model") != model:
                bad(n, "mismatched_model", "Every line of a batch must use the same model.")
            else:
                model = item["body"].get("model")
                seen.add(custom_id)
                lines.append((custom_id, item["body"]))
        if not lines and not errors:
            bad(0, "empty_file", "The input file holds no requests.")
        return lines, errors

    def _openai_list(self, query: dict[str, list[str]]) -> Answer:
        limit = int((query.get("limit") or ["20"])[0])
        after = (query.get("after") or [""])[0]
        newest = sorted((b for b in self._batches.values() if b.vendor == "openai"), key=lambda b: -b.created)
        if after:
            ids = [b.id for b in newest]
            newest = newest[ids.index(after) + 1:] if after in ids else []
        page = newest[:limit]
        return _json(200, {"object": "list", "data": [self._openai_view(self._look(b)) for b in page],
                           "first_id": page[0].id if page else None, "last_id": page[-1].id if page else None,
                           "has_more": len(newest) > limit})

    def _openai_view(self, b: _Batch) -> dict[str, Any]:
        done = [r for r in b.results if (r.get("response") or {}).get("status_code") == 200]
        return {
            "id": b.id, "object": "batch", "endpoint": b.endpoint, "input_file_id": b.input_file_id,
            "completion_window": "24h", "status": b.status, "created_at": int(b.created),
            "errors": {"object": "list", "data": b.errors} if b.errors else None,
            "output_file_id": b.output_file_id or None, "error_file_id": b.error_file_id or None,
            "request_counts": {"total": len(b.lines), "completed": len(done),
                               "failed": len(b.results) - len(done)},
            "completed_at": int(b.ended_at) if b.status == "completed" else None, "metadata": None,
        }

    # -- Anthropic ------------------------------------------------------------------------------

    def _anthropic(self, method: str, path: str, query: dict[str, list[str]], raw: bytes) -> Answer:
        if path == "/v1/messages/batches" and method == "POST":
            return self._anthropic_create(raw)
        if path == "/v1/messages/batches":
            limit = int((query.get("limit") or ["20"])[0])
            newest = sorted((b for b in self._batches.values() if b.vendor == "anthropic"), key=lambda b: -b.created)
            page = [self._anthropic_view(self._look(b)) for b in newest[:limit]]
            return _json(200, {"data": page, "has_more": len(newest) > limit,
                               "first_id": page[0]["id"] if page else None,
                               "last_id": page[-1]["id"] if page else None})
        batch = self._batches.get(path.split("/")[4])
        if batch is None or batch.vendor != "anthropic":
            return _anthropic_error(404, f"message batch {path.split('/')[4]} not found", "not_found_error")
        if path.endswith("/cancel"):
            if batch.status == "in_progress":
                batch.canceled = True
            return _json(200, self._anthropic_view(self._look(batch)))
        batch = self._look(batch)
        if path.endswith("/results"):
            if batch.status != "ended":
                return _anthropic_error(400, f"message batch {batch.id} has not ended yet")
            return 200, b"".join(json.dumps(r).encode() + b"\n" for r in batch.results), "application/binary"
        return _json(200, self._anthropic_view(batch))

    def _anthropic_create(self, raw: bytes) -> Answer:
        try:
            body = json.loads(raw)
        except ValueError:
            return _anthropic_error(400, "request body is not valid JSON")
        requests = body.get("requests") if isinstance(body, dict) else None
        if not isinstance(requests, list) or not requests:
            return _anthropic_error(400, "requests: at least one request is required")
        seen: set[str] = set()
        lines = []
        for i, item in enumerate(requests):
            custom_id = item.get("custom_id") if isinstance(item, dict) else None
            if not isinstance(custom_id, str) or not CUSTOM_ID.match(custom_id):
                return _anthropic_error(400, f"requests.{i}.custom_id: must match ^[a-zA-Z0-9_-]{{1,64}}$")
            if custom_id in seen:
                return _anthropic_error(400, f"requests.{i}.custom_id: duplicate custom_id '{custom_id}'")
            params = item.get("params")
            missing = [k for k in ("model", "max_tokens", "messages")
                       if not isinstance(params, dict) or k not in params]
            if missing:
                return _anthropic_error(400, f"requests.{i}.params.{missing[0]}: Field required")
            seen.add(custom_id)
            lines.append((custom_id, params))
        now = time.time()
        batch = _Batch("anthropic", f"msgbatch_{uuid.uuid4().hex[:24]}", lines, now, now + self.delay)
        self._count(batch)
        self._batches[batch.id] = batch
        return _json(200, self._anthropic_view(batch))

    def _anthropic_view(self, b: _Batch) -> dict[str, Any]:
        counts = Counter(r["result"]["type"] for r in b.results)
        status = {"ended": "ended", "in_progress": "canceling" if b.canceled else "in_progress"}[b.status]
        return {
            "id": b.id, "type": "message_batch", "processing_status": status,
            "request_counts": {"processing": 0 if b.results else len(b.lines), "succeeded": counts["succeeded"],
                               "errored": counts["errored"], "canceled": counts["canceled"],
                               "expired": counts["expired"]},
            "created_at": _iso(b.created), "ended_at": _iso(b.ended_at) if b.ended_at else None,
            "expires_at": _iso(b.created + 86400), "cancel_initiated_at": None, "archived_at": None,
            "results_url": f"{self.server.url}/v1/messages/batches/{b.id}/results" if b.status == "ended" else None,
        }

    # -- both -----------------------------------------------------------------------------------

    def _count(self, batch: _Batch) -> None:
        for custom_id, _ in batch.lines:
            self.submitted[custom_id] += 1

    def _look(self, b: _Batch) -> _Batch:
        """End ``b`` when it is due (or cancelled), answering each of its requests."""
        if b.status not in ("in_progress",) or (not b.canceled and (self._held or time.time() < b.due)):
            return b
        now = time.time()
        for custom_id, body in b.lines:
            line = BatchLine(b.vendor, b.id, custom_id, body)
            if b.canceled:
                line.state = "canceled"
                b.results.append(self._line(b, line, None))
            else:
                reply = self._reply(b, body)
                line.state = reply.batch_state or ("succeeded" if reply.status == 200 else "errored")
                b.results.append(self._line(b, line, reply))
            self.lines.append(line)
        b.ended_at = now
        if b.vendor == "anthropic":
            b.status = "ended"
            return b
        b.status = "cancelled" if b.canceled else "completed"
        ok = [r for r in b.results if (r.get("response") or {}).get("status_code") == 200]
        failed = [r for r in b.results if r not in ok]
        if ok:
            b.output_file_id = self._file(ok)
        if failed:
            b.error_file_id = self._file(failed)
        return b

    def _file(self, lines: list[dict[str, Any]]) -> str:
        file_id = f"file-{uuid.uuid4().hex[:24]}"
        self._files[file_id] = ("batch_output", b"".join(json.dumps(x).encode() + b"\n" for x in lines))
        return file_id

    def _reply(self, b: _Batch, body: dict[str, Any]) -> Reply:
        path = "/v1/chat/completions" if b.vendor == "openai" else "/v1/messages"
        return self.server._choose(RecordedRequest("POST", path, {BATCH_HEADER: b.id}, body, time.monotonic()))

    def _line(self, b: _Batch, line: BatchLine, reply: Reply | None) -> dict[str, Any]:
        model = str(line.body.get("model") or "mock")
        if b.vendor == "anthropic":
            if reply is None:
                return {"custom_id": line.custom_id, "result": {"type": "canceled"}}
            if line.state == "succeeded":
                return {"custom_id": line.custom_id,
                        "result": {"type": "succeeded", "message": answer_body("anthropic", reply, model)}}
            if line.state == "expired":
                return {"custom_id": line.custom_id, "result": {"type": "expired"}}
            return {"custom_id": line.custom_id,
                    "result": {"type": "errored", "error": error_body("anthropic", reply.status or 500)}}
        request_id = f"batch_req_{uuid.uuid4().hex[:16]}"
        if reply is None or line.state == "expired":
            code = "batch_cancelled" if reply is None else "batch_expired"
            return {"id": request_id, "custom_id": line.custom_id, "response": None,
                    "error": {"code": code, "message": f"This request was not run: {code}."}}
        if line.state == "succeeded":
            return {"id": request_id, "custom_id": line.custom_id,
                    "response": {"status_code": 200, "request_id": request_id,
                                 "body": answer_body("openai", reply, model)}, "error": None}
        status = reply.status if reply.status != 200 else 500
        return {"id": request_id, "custom_id": line.custom_id,
                "response": {"status_code": status, "request_id": request_id, "body": error_body("openai", status)},
                "error": None}


def record(method: str, target: str, headers: dict[str, str], raw: bytes) -> RecordedRequest:
    """What the server records of a batch endpoint's call (its JSON body, when it has one)."""
    try:
        body: Any = json.loads(raw) if raw and headers.get("content-type", "").startswith("application/json") else None
    except ValueError:
        body = None
    return RecordedRequest(method, target, headers, body, time.monotonic())
