"""``SHELLY_LOG_FORMAT=json`` on a real worker: its lines are JSON objects, and a line logged inside
a run's step (a provider retry) carries the run, session, agent and worker."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shelly_dist.testing.model_server import ModelServer, Reply

from .cluster import Cluster, complete, delegate, scripted, wait_until
from .ops import run_json

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in text.splitlines() if raw.startswith("{")]


def test_a_worker_logs_json_lines_with_the_run_session_agent_and_worker(cluster: Cluster):
    with ModelServer(format="openai") as server:
        server.push(Reply.error(503), Reply(tool_calls=complete("helped")["tool_calls"]))
        cluster.write_config(
            [scripted("lead", lead=[delegate(("helper", "inspect the logs")), "lead done"]),
             {"name": "mock", "kind": "openai", "model": "gpt-test", "base_url": server.url, "api_key": "k",
              "rate_limit": {"max_retries": 2, "base_delay": 0.01}}],
            [{"name": "lead", "provider": "lead", "options": {"max_delegation_depth": 1}},
             {"name": "helper", "provider": "mock"}],
        )
        hostname = cluster.start_worker("w1", env={"SHELLY_LOG_FORMAT": "json"})
        out = run_json(cluster, "investigate")
    log = cluster.logs[hostname]
    helper = next(r for r in cluster.runs(out["session"]) if r["agent"] == "helper")

    def retry_line() -> dict[str, Any] | None:
        return next((ln for ln in json_lines(log.read_text()) if "retry 1/2" in ln["message"]), None)

    retry = wait_until(retry_line, 30, f"the provider's retry line in the worker log:\n{log.read_text()[-3000:]}")
    assert retry["level"] == "WARNING"
    assert retry["run"] == helper["id"]
    assert retry["session"] == out["session"]
    assert retry["agent"].startswith("helper-")
    assert retry["worker"] == hostname
    celery = [ln for ln in json_lines(log.read_text()) if ln["logger"].startswith("celery")]
    assert any("succeeded" in ln["message"] for ln in celery), "Celery's own task lines are JSON too"
    assert "[tasks]" not in log.read_text(), "no startup banner among the JSON lines"
