"""Tree limits on the pool: real Redis, real ``shelly worker`` subprocesses, the model calls counted
at a loopback model server (the issue's "done when": a tree limited to N model requests across
several workers sends at most N, under concurrency)."""

from __future__ import annotations

import json

import pytest

from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply, speaker

from .cluster import Cluster

pytestmark = pytest.mark.integration

CHILDREN = 6
CALLS_PER_CHILD = 3


def fan_out(req: RecordedRequest) -> Reply:
    """The lead delegates six diggers at once; a digger calls a tool twice, then completes."""
    turns = sum(1 for m in req.body["messages"] if m["role"] == "assistant")
    usage = {"input": 10, "output": 5}
    if speaker(req) == "lead":
        if turns == 0:
            return Reply(text="", usage=usage, tool_calls=[{"name": "delegate", "arguments": {"tasks": [
                {"agent": "digger", "task": f"dig {i}", "context": ""} for i in range(CHILDREN)]}}])
        return Reply(text="lead saw: " + req.body["messages"][-1]["content"], usage=usage)
    if turns < CALLS_PER_CHILD - 1:
        return Reply(text="", delay=0.2, usage=usage,
                     tool_calls=[{"name": "shared_state_get", "arguments": {"key": "k"}}])
    return Reply(text="", usage=usage, tool_calls=[{"name": "task_complete", "arguments": {
        "status": "completed", "summary": "dug"}}])


def team(cluster: Cluster, server: ModelServer, limits: dict[str, float] | None) -> None:
    lead: dict[str, object] = {"name": "lead", "options": {"max_delegation_depth": 1}}
    if limits:
        lead["limits"] = limits
    cluster.write_config(
        [{"name": "vendor", "kind": "openai", "model": "test-model", "base_url": server.url, "api_key": "sk-test",
          "max_tokens": 100, "rate_limit": {"max_retries": 0}}],
        [lead, {"name": "digger", "toolboxes": ["state"]}],
        pricing=[{"provider": "openai", "prefix": "test-model", "input": 1.0, "output": 2.0}],
    )


CALL_COST = (10 * 1.0 + 5 * 2.0) / 1_000_000
"""Every call reports 10 tokens in and 5 out, at the config's price."""


def test_a_tree_limited_to_n_model_requests_across_two_workers_sends_exactly_n(cluster: Cluster):
    with ModelServer(format="openai", responder=fan_out) as server:
        team(cluster, server, {"model_requests": 7})
        # Two slots each (prefetch 1 per slot): neither worker can hold all six children.
        cluster.start_worker("w1", concurrency=2)
        cluster.start_worker("w2", concurrency=2)
        out = cluster.shelly("run", "go", timeout=180)
        assert out.returncode == 1, f"{out.stderr}\n{cluster.worker_log()}"
        assert " reached model_requests 7" in out.stderr
        assert len(server.requests) == 7  # 1 + 6 × 3 + 1 = 20 without the limit
        (session,) = cluster.session_ids()
        runs = cluster.runs(session)
        children = [r for r in runs if r["parent"]]
        assert len(children) == CHILDREN
        assert {r["worker"].split("@")[0] for r in children} == {"w1", "w2"}
        # Every child was stopped by the tree's limit and reported Shelly's failed completion.
        child_runs = {r["id"] for r in children}  # the root reports its own run_finished too
        entries = [e["data"]["entry"] for e in cluster.events(session)
                   if e["kind"] == "run_finished" and e["run_id"] in child_runs]
        assert len(entries) == CHILDREN
        for entry in entries:
            assert "error" not in entry
            assert entry["completion"]["summary"] == (
                'Agent "digger" exhausted its model_requests budget without completing the task.')
            assert " reached model_requests 7." in entry["completion"]["caveats"]


def test_shelly_runs_shows_each_runs_own_and_subtree_spending(cluster: Cluster):
    with ModelServer(format="openai", responder=fan_out) as server:
        team(cluster, server, None)
        cluster.start_worker("w1")
        out = cluster.shelly("run", "go", timeout=180)
        assert out.returncode == 0, f"{out.stderr}\n{cluster.worker_log()}"
        (session,) = cluster.session_ids()
        runs = cluster.runs(session)
        (root,) = [r for r in runs if not r["parent"]]
        calls = 1 + CHILDREN * CALLS_PER_CHILD + 1
        assert root["own"] == {"total_tokens": 2 * 15, "cost_usd": pytest.approx(2 * CALL_COST), "model_requests": 2}
        assert root["tree"] == {"total_tokens": calls * 15, "cost_usd": pytest.approx(calls * CALL_COST),
                                "model_requests": calls}
        for child in (r for r in runs if r["parent"]):
            assert child["own"] == child["tree"] == {"total_tokens": CALLS_PER_CHILD * 15,
                                                     "cost_usd": pytest.approx(CALLS_PER_CHILD * CALL_COST),
                                                     "model_requests": CALLS_PER_CHILD}
        finished = [e for e in cluster.events(session) if e["kind"] == "run_finished" and e["run_id"] != root["id"]]
        assert len(finished) == CHILDREN
        for event in finished:
            assert event["data"]["usage"]["cost_usd"] == pytest.approx(CALLS_PER_CHILD * CALL_COST)
        table = cluster.shelly("runs", "--session", session)
        assert f"tree: tokens={calls * 15} cost=${calls * CALL_COST:.4f} requests={calls}" in table.stdout


def test_without_a_limit_the_same_tree_sends_every_call(cluster: Cluster):
    with ModelServer(format="openai", responder=fan_out) as server:
        team(cluster, server, None)
        cluster.start_worker("w1")
        out = cluster.shelly("run", "go", "--json", timeout=180)
        assert out.returncode == 0, f"{out.stderr}\n{cluster.worker_log()}"
        assert len(server.requests) == 1 + CHILDREN * CALLS_PER_CHILD + 1
        assert json.loads(out.stdout)["reply"].startswith("lead saw: ")
