"""Tree limits and pricing end to end: ``shelly run`` (embedded) against a loopback server in
OpenAI's wire format, ``limits:`` and ``pricing:`` in ``.shelly/config.yaml``."""

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


def project(tmp_path: Path, server: ModelServer, agents: list[dict[str, Any]], model: str = "test-model",
            **extra: Any) -> Path:
    (tmp_path / ".shelly").mkdir()
    (tmp_path / ".shelly" / "config.yaml").write_text(yaml.safe_dump({
        "providers": [{"name": "vendor", "kind": "openai", "model": model, "base_url": server.url,
                       "api_key": "sk-test", "max_tokens": 100, "rate_limit": {"max_retries": 0}}],
        "agents": agents, **extra,
    }))
    return tmp_path


def shelly_run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shelly_dist.cli.main", "run", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def team(req: RecordedRequest) -> Reply:
    """The lead delegates three diggers; each digger calls a tool forever; the lead then answers
    with what it saw."""
    turns = sum(1 for m in req.body["messages"] if m["role"] == "assistant")
    if speaker(req) == "lead":
        if turns == 0:
            return Reply(text="", tool_calls=[{"name": "delegate", "arguments": {"tasks": [
                {"agent": "digger", "task": f"dig {i}", "context": ""} for i in range(3)]}}])
        return Reply(text="lead saw: " + req.body["messages"][-1]["content"], usage={"input": 10, "output": 5})
    return Reply(text="", tool_calls=[{"name": "shared_state_get", "arguments": {"key": "k"}}],
                 usage={"input": 10, "output": 5})


LEAD = {"name": "lead", "options": {"max_delegation_depth": 1}}
DIGGER = {"name": "digger", "toolboxes": ["state"]}


def test_a_tree_limited_to_n_model_requests_sends_n_and_exits_1_naming_the_limit(tmp_path: Path):
    with ModelServer(format="openai", responder=team) as server:
        cwd = project(tmp_path, server, [{**LEAD, "limits": {"model_requests": 7}}, DIGGER])
        out = shelly_run(cwd, "go")
        assert out.returncode == 1, out.stderr
        assert len(server.requests) == 7
        assert "limits: tree of run " in out.stderr and " reached model_requests 7" in out.stderr


def test_a_child_stopped_by_its_limit_returns_a_failed_completion_to_its_parent(tmp_path: Path):
    with ModelServer(format="openai", responder=team) as server:
        cwd = project(tmp_path, server, [LEAD, {**DIGGER, "limits": {"model_requests": 2}}])
        out = shelly_run(cwd, "go", "--json")
        assert out.returncode == 0, out.stderr
        entries = json.loads(json.loads(out.stdout)["reply"].removeprefix("lead saw: "))
        assert len(server.requests) == 1 + 3 * 2 + 1
        for entry in entries:
            assert entry["completion"]["status"] == "failed"
            assert entry["completion"]["summary"] == (
                'Agent "digger" exhausted its model_requests budget without completing the task.')
            assert "reached model_requests 2" in entry["completion"]["caveats"]


def test_run_json_prices_the_usage_at_the_default_table(tmp_path: Path):
    def answer(req: RecordedRequest) -> Reply:
        return Reply(text="hi", usage={"input": 1_000, "output": 100})

    with ModelServer(format="openai", responder=answer) as server:
        cwd = project(tmp_path, server, [{"name": "solo"}], model="gpt-4o-2024-08-06")
        out = shelly_run(cwd, "hello", "--json")
        assert out.returncode == 0, out.stderr
        usage = json.loads(out.stdout)["usage"]
        assert usage["cost_usd"] == pytest.approx((1_000 * 2.5 + 100 * 10.0) / 1_000_000)


def test_config_pricing_overrides_the_default_and_a_cost_limit_stops_the_run(tmp_path: Path):
    def loop(req: RecordedRequest) -> Reply:
        return Reply(text="", tool_calls=[{"name": "shared_state_get", "arguments": {"key": "k"}}],
                     usage={"input": 100, "output": 0})

    with ModelServer(format="openai", responder=loop) as server:
        # 1 USD per input token (unpriced without the override): each call reports 100 tokens, so
        # costs 100, and reserves its estimated input in dollars (output is free here); the tenth
        # call could never fit, whatever the estimate.
        cwd = project(tmp_path, server, [{**DIGGER, "limits": {"cost_usd": 1000}}],
                      pricing=[{"provider": "openai", "prefix": "test-model", "input": 1_000_000}])
        out = shelly_run(cwd, "go")
        assert out.returncode == 1, out.stderr
        assert " reached cost_usd 1000" in out.stderr
        assert 1 <= len(server.requests) < 10


def test_a_call_answered_by_a_fallback_provider_is_priced_at_the_fallbacks_model(tmp_path: Path):
    with (ModelServer(format="openai", responder=lambda req: Reply.error(500)) as down,
          ModelServer(format="openai", responder=lambda req: Reply(text="hi", usage={"input": 1_000, "output": 100}))
          as up):
        (tmp_path / ".shelly").mkdir()
        (tmp_path / ".shelly" / "config.yaml").write_text(yaml.safe_dump({
            "providers": [
                {"name": "main", "kind": "openai", "model": "gpt-4o", "base_url": down.url, "api_key": "k",
                 "rate_limit": {"max_retries": 1, "base_delay": "10ms"}, "fallback": ["backup"]},
                {"name": "backup", "kind": "openai", "model": "gpt-4o-mini", "base_url": up.url, "api_key": "k",
                 "rate_limit": {"max_retries": 0}},
            ],
            "agents": [{"name": "solo", "provider": "main"}],
        }))
        out = shelly_run(tmp_path, "hello", "--json")
        assert out.returncode == 0, out.stderr
        assert len(down.requests) == 2 and len(up.requests) == 1  # one retry (0 means Go's default 3)
        usage = json.loads(out.stdout)["usage"]
        assert usage["cost_usd"] == pytest.approx((1_000 * 0.15 + 100 * 0.60) / 1_000_000)  # gpt-4o-mini's price
