"""The loopback mock model server: recording, scripting, and the standalone process."""

from __future__ import annotations

import subprocess
import sys

import httpx2
import pytest

from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply, speaker


def test_requests_are_recorded_with_path_headers_and_body() -> None:
    with ModelServer() as server:
        httpx2.post(server.url + "/v1/messages", json={"model": "m"}, headers={"X-Test": "1"})
        [req] = server.requests
    assert (req.method, req.path, req.body) == ("POST", "/v1/messages", {"model": "m"})
    assert req.headers["x-test"] == "1"
    assert req.answered >= req.arrived


def test_queued_replies_are_used_in_order_then_the_default() -> None:
    with ModelServer(default=Reply(text="default")) as server:
        server.push(Reply(text="first"), Reply.error(500))
        url = server.url + "/v1/chat/completions"
        answers = [httpx2.post(url, json={}) for _ in range(3)]
    assert answers[0].json()["choices"][0]["message"]["content"] == "first"
    assert answers[1].status_code == 500
    assert answers[2].json()["choices"][0]["message"]["content"] == "default"


def test_an_unknown_path_is_404_unless_a_format_is_set() -> None:
    with ModelServer() as server:
        assert httpx2.post(server.url + "/other", json={}).status_code == 404
    with ModelServer(format="anthropic") as server:
        assert httpx2.post(server.url + "/other", json={}).json()["type"] == "message"


def test_wait_for_requests_times_out_with_a_clear_error() -> None:
    with ModelServer() as server, pytest.raises(TimeoutError, match="0 of 1 requests"):
        server.wait_for_requests(1, timeout=0.05)


def test_runs_as_a_separate_process_answering_with_a_fixed_reply() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "shelly_dist.testing.model_server",
            "--latency",
            "0.01",
            "--format",
            "openai",
            "--text",
            "pong",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:")
        url = line.split()[-1]
        answer = httpx2.post(url + "/v1/chat/completions", json={"model": "m", "messages": []})
        assert answer.json()["choices"][0]["message"]["content"] == "pong"
    finally:
        proc.terminate()
        code = proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
    assert code == 0


def test_speaker_is_the_instance_named_by_identity_wherever_the_provider_put_it() -> None:
    def request(body: dict) -> RecordedRequest:
        return RecordedRequest("POST", "/", {}, body, 0.0)

    openai = {"messages": [{"role": "system", "content": "You are working on a task delegated to you."},
                           {"role": "user", "content": "<identity>\nYou are worker-a-1. w\n</identity>\n\nctx"}]}
    anthropic = {"system": [{"type": "text", "text": "shared"}, {"type": "text", "text":
                                                                 "<identity>\nYou are lead. d\n</identity>"}]}
    assert [speaker(request(b)) for b in (openai, anthropic, {"messages": []})] == ["worker-a-1", "lead", ""]
