"""Reflections end to end: a child that fails leaves a note, and the next child given a similar
task finds it in its ``<prior_reflections>`` — in the state directory when embedded (never in
``.shelly/``), in Redis on a worker pool, where the note written by one worker is found by a
delegation on another."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from shelly_dist.redisio.keys import Keys
from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply, speaker

from .cluster import Cluster

pytestmark = pytest.mark.integration

TASK = "refactor the authentication middleware"


def respond(req: RecordedRequest) -> Reply:
    """The lead delegates TASK, then ends; the worker fails its first attempt and completes after."""
    turns = sum(1 for m in req.body["messages"] if m["role"] == "assistant")
    if speaker(req) == "lead":
        if turns == 0:
            return Reply(text="", tool_calls=[{"id": "call_deleg", "name": "delegate", "arguments": {
                "tasks": [{"agent": "worker", "task": TASK, "context": ""}]}}])
        return Reply(text="lead done")
    failed = "<prior_reflections>" not in json.dumps(req.body)
    return Reply(text="", tool_calls=[{"id": "call_done", "name": "task_complete", "arguments": {
        "status": "failed" if failed else "completed",
        "summary": "the middleware tests hang on the session store" if failed else "done",
        "caveats": "run with REDIS_URL set"}}])


def _worker_requests(server: ModelServer) -> list[str]:
    return [json.dumps(r.body) for r in server.requests if speaker(r).startswith("worker-")]


def _agents() -> list[dict]:
    return [{"name": "lead", "provider": "mock", "options": {"max_delegation_depth": 1}},
            {"name": "worker", "provider": "mock"}]


def _provider(server: ModelServer) -> dict:
    return {"name": "mock", "kind": "openai", "model": "gpt-test", "base_url": server.url, "api_key": "k",
            "rate_limit": {"max_retries": 0}}


def test_an_embedded_failure_note_is_kept_in_the_state_dir_and_given_to_the_next_similar_task(tmp_path: Path):
    project, state = tmp_path / "project", tmp_path / "state"
    (project / ".shelly").mkdir(parents=True)
    with ModelServer(format="openai", responder=respond) as server:
        (project / ".shelly" / "config.yaml").write_text(yaml.safe_dump(
            {"providers": [_provider(server)], "agents": _agents()}))
        env = {**os.environ, "SHELLY_STATE_DIR": str(state)}
        for _ in range(2):
            out = subprocess.run([sys.executable, "-m", "shelly_dist.cli.main", "run", "go"], cwd=project, env=env,
                                 capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stderr
        first, second = _worker_requests(server)
    assert "<prior_reflections>" not in first
    assert "<prior_reflections>" in second and "the middleware tests hang on the session store" in second
    (note,) = (state / "reflections").iterdir()
    assert note.name.startswith("worker-") and note.suffix == ".md"
    assert f"## Task\n{TASK}\n" in note.read_text()
    assert not list((project / ".shelly").rglob("*.md")), "nothing is written under .shelly/"


def test_a_failure_note_written_on_one_worker_is_given_to_a_child_on_another(cluster: Cluster):
    with ModelServer(format="openai", responder=respond) as server:
        cluster.write_config([_provider(server)], _agents())
        first = cluster.start_worker("wa")
        out = cluster.shelly("run", "go", timeout=120)
        assert out.returncode == 0, f"{out.stderr}\n{cluster.worker_log()}"
        notes = cluster.redis.zrange(Keys(cluster.prefix).reflections(), 0, -1)
        assert len(notes) == 1 and f"## Task\n{TASK}\n" in notes[0]
        assert 0 < cluster.redis.ttl(Keys(cluster.prefix).reflections())
        cluster.kill_worker(first)
        cluster.start_worker("wb")
        out = cluster.shelly("run", "go", timeout=120)
        assert out.returncode == 0, f"{out.stderr}\n{cluster.worker_log()}"
        first_request, second_request = _worker_requests(server)
    assert "<prior_reflections>" not in first_request
    assert "<prior_reflections>" in second_request
    assert "the middleware tests hang on the session store" in second_request
