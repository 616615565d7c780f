"""The stand-in for the vendors' batch APIs refuses what the vendors refuse."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from shelly_dist.testing.model_server import ModelServer

OPENAI = {"Authorization": "Bearer k"}
ANTHROPIC = {"x-api-key": "k", "anthropic-version": "2023-06-01"}


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer(batch_delay=0) as s:
        yield s


def call(server: ModelServer, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
         data: bytes | None = None, ctype: str = "application/json") -> tuple[int, Any]:
    raw = data if data is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(server.url + path, data=raw, method=method,
                                 headers={**(headers or {}), "Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, text = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text.decode()


def upload(server: ModelServer, lines: list[Any], purpose: str = "batch") -> tuple[int, Any]:
    boundary = "b0undary"
    content = "".join(json.dumps(x) + "\n" for x in lines)
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n{purpose}\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n"
            f"Content-Type: application/jsonl\r\n\r\n{content}\r\n--{boundary}--\r\n").encode()
    return call(server, "POST", "/v1/files", headers=OPENAI, data=body,
                ctype=f"multipart/form-data; boundary={boundary}")


def line(custom_id: str | None = "a", url: str = "/v1/chat/completions", model: str = "m") -> dict[str, Any]:
    item: dict[str, Any] = {"method": "POST", "url": url, "body": {"model": model, "messages": []}}
    if custom_id is not None:
        item["custom_id"] = custom_id
    return item


def openai_batch(server: ModelServer, lines: list[Any]) -> dict[str, Any]:
    status, file = upload(server, lines)
    assert status == 200
    status, batch = call(server, "POST", "/v1/batches", {"input_file_id": file["id"], "endpoint":
                                                          "/v1/chat/completions", "completion_window": "24h"}, OPENAI)
    assert status == 200
    return batch


@pytest.mark.parametrize(("lines", "code"), [
    ([line(None)], "missing_required_parameter"),
    ([line("a"), line("a")], "duplicate_custom_id"),
    ([line("a", url="/v1/embeddings")], "invalid_url"),
    ([line("a"), line("b", model="other")], "mismatched_model"),
])
def test_an_openai_batch_with_a_malformed_line_fails_with_openais_errors(server: ModelServer, lines: list[Any],
                                                                         code: str) -> None:
    batch = openai_batch(server, lines)
    assert batch["status"] == "failed" and batch["errors"]["data"][0]["code"] == code
    assert server.batches.submitted == {}


def test_an_openai_upload_needs_purpose_batch_and_a_key(server: ModelServer) -> None:
    assert upload(server, [line()], purpose="assistants")[0] == 400
    assert call(server, "GET", "/v1/batches")[0] == 401


def test_an_openai_batch_needs_a_known_file_a_chat_endpoint_and_a_24h_window(server: ModelServer) -> None:
    _, file = upload(server, [line()])
    for body, status in [({"input_file_id": "file-nope", "endpoint": "/v1/chat/completions",
                           "completion_window": "24h"}, 404),
                         ({"input_file_id": file["id"], "endpoint": "/v1/chat", "completion_window": "24h"}, 400),
                         ({"input_file_id": file["id"], "endpoint": "/v1/chat/completions",
                           "completion_window": "1h"}, 400)]:
        assert call(server, "POST", "/v1/batches", body, OPENAI)[0] == status


def test_an_openai_batch_completes_into_an_output_file_of_chat_completions(server: ModelServer) -> None:
    batch = openai_batch(server, [line("a"), line("b")])
    _, done = call(server, "GET", f"/v1/batches/{batch['id']}", headers=OPENAI)
    assert done["status"] == "completed" and done["request_counts"] == {"total": 2, "completed": 2, "failed": 0}
    _, content = call(server, "GET", f"/v1/files/{done['output_file_id']}/content", headers=OPENAI)
    rows = [json.loads(x) for x in content.splitlines()] if isinstance(content, str) else [content]
    assert sorted(r["custom_id"] for r in rows) == ["a", "b"]
    assert rows[0]["response"]["body"]["choices"][0]["message"]["content"] == "ok"


@pytest.mark.parametrize(("requests", "problem"), [
    ([], "at least one request"),
    ([{"params": {"model": "m", "max_tokens": 1, "messages": []}}], "custom_id"),
    ([{"custom_id": "a b", "params": {"model": "m", "max_tokens": 1, "messages": []}}], "custom_id"),
    ([{"custom_id": "a", "params": {"model": "m", "max_tokens": 1, "messages": []}},
      {"custom_id": "a", "params": {"model": "m", "max_tokens": 1, "messages": []}}], "duplicate"),
    ([{"custom_id": "a", "params": {"model": "m", "messages": []}}], "max_tokens"),
])
def test_an_anthropic_batch_with_a_malformed_request_is_refused(server: ModelServer, requests: list[Any],
                                                                problem: str) -> None:
    status, answer = call(server, "POST", "/v1/messages/batches", {"requests": requests}, ANTHROPIC)
    assert status == 400 and problem in answer["error"]["message"]
    assert server.batches.batches() == []


def test_anthropic_results_are_read_only_once_the_batch_has_ended(server: ModelServer) -> None:
    server.batches.hold()
    _, batch = call(server, "POST", "/v1/messages/batches",
                    {"requests": [{"custom_id": "a", "params": {"model": "m", "max_tokens": 1, "messages": []}}]},
                    ANTHROPIC)
    assert batch["processing_status"] == "in_progress"
    assert call(server, "GET", f"/v1/messages/batches/{batch['id']}/results", headers=ANTHROPIC)[0] == 400
    server.batches.release()
    _, ended = call(server, "GET", f"/v1/messages/batches/{batch['id']}", headers=ANTHROPIC)
    assert ended["processing_status"] == "ended" and ended["request_counts"]["succeeded"] == 1
    status, results = call(server, "GET", f"/v1/messages/batches/{batch['id']}/results", headers=ANTHROPIC)
    assert status == 200 and results["result"]["type"] == "succeeded"
