"""Effects end to end: ``shelly run`` (embedded) against a loopback server in OpenAI's wire format,
budgets configured in ``.shelly/config.yaml``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply, speaker

pytestmark = pytest.mark.integration


def project(tmp_path: Path, server: ModelServer, agents: list[dict[str, Any]]) -> Path:
    (tmp_path / ".shelly").mkdir()
    (tmp_path / ".shelly" / "config.yaml").write_text(yaml.safe_dump({
        "providers": [{"name": "vendor", "kind": "openai", "model": "test-model", "base_url": server.url,
                       "api_key": "sk-test", "rate_limit": {"max_retries": 0}}],
        "agents": agents,
    }))
    return tmp_path


def shelly_run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shelly_dist.cli.main", "run", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def always_a_tool(req: RecordedRequest) -> Reply:
    return Reply(text="", tool_calls=[{"name": "shared_state_set", "arguments": {"key": "k", "value": "v"}}],
                 usage={"input": 30, "output": 0})


def test_a_token_budget_warns_the_model_then_ends_the_run_with_exit_1(tmp_path: Path):
    with ModelServer(format="openai", responder=always_a_tool) as server:
        cwd = project(tmp_path, server, [{"name": "solo", "toolboxes": ["state"], "effects": [
            {"kind": "token_budget", "params": {"max_tokens": 100, "warn_threshold": 0.5}}]}])
        out = shelly_run(cwd, "loop forever")
        assert out.returncode == 1, out.stderr
        assert "token budget exhausted" in out.stderr
        assert len(server.requests) == 4  # 30, 60 (warned), 90, 120 (over)
        third = json.dumps(server.requests[2].body)
        assert "You've used 60% of your token budget (60/100 tokens)." in third


def test_a_child_out_of_time_returns_shellys_failed_completion_to_its_parent(tmp_path: Path):
    def respond(req: RecordedRequest) -> Reply:
        turns = sum(1 for m in req.body["messages"] if m["role"] == "assistant")
        if speaker(req) == "lead":
            if turns == 0:
                return Reply(text="", tool_calls=[{"name": "delegate", "arguments": {
                    "tasks": [{"agent": "digger", "task": "dig deep", "context": ""}]}}])
            return Reply(text="lead saw: " + req.body["messages"][-1]["content"])
        return Reply(text="", delay=1.2, tool_calls=[{"name": "shared_state_get", "arguments": {"key": "k"}}])

    with ModelServer(format="openai", responder=respond) as server:
        cwd = project(tmp_path, server, [
            {"name": "lead", "options": {"max_delegation_depth": 1}},
            {"name": "digger", "toolboxes": ["state"], "effects": [
                {"kind": "time_budget", "params": {"max_duration": "1s"}}]},
        ])
        out = shelly_run(cwd, "go", "--json")
        assert out.returncode == 0, out.stderr
        (entry,) = json.loads(json.loads(out.stdout)["reply"].removeprefix("lead saw: "))
        assert entry["completion"] == {
            "status": "failed",
            "summary": 'Agent "digger" exhausted its time budget without completing the task.',
            "caveats": "Time budget exhausted. Check progress notes for partial work.",
        }
