"""``handoff`` on the pool (behaviours 48–49 on real workers): the peer runs as the same delegation
entry on any worker, its chat opened by ``<handoff_context>``; refused handoffs are entry errors
with Shelly's texts; the peer re-claims the delegation's board task."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shelly_dist.redisio.keys import Keys

from .cluster import Cluster, complete, scripted

pytestmark = pytest.mark.integration


def handoff(target: str, reason: str = "needs coding", context: str = "plan ready") -> dict[str, Any]:
    return {"tool_calls": [{"name": "handoff", "arguments": {"target_agent": target, "reason": reason,
                                                              "context": context}}]}


def delegate_all(*tasks: tuple[str, str]) -> dict[str, Any]:
    return {"tool_calls": [{"name": "delegate", "arguments": {
        "tasks": [{"agent": a, "task": t, "context": "original ctx"} for a, t in tasks]}}]}


def run_json(cluster: Cluster, task: str) -> dict[str, Any]:
    out = cluster.shelly("run", task, "--json", "--quiet", timeout=120)
    assert out.returncode == 0, f"stdout:{out.stdout}\nstderr:{out.stderr}\n{cluster.worker_log()}"
    return json.loads(out.stdout)


def board_task_in_a_second_turn(cluster: Cluster, first_turn: str) -> tuple[str, str, dict[str, Any]]:
    """Turn one opens a session, a task is created on its board, turn two's prompt is the task id
    (the lead's script delegates on it with ``task_id: "{task}"``); the session, task id and the
    second turn's output."""
    session = run_json(cluster, first_turn)["session"]
    made = cluster.shelly("tasks", "create", "the job", "--session", session)
    assert made.returncode == 0, made.stderr
    task_id = json.loads(made.stdout)["id"]
    out = cluster.shelly("run", task_id, "--session", session, "--json", "--quiet", timeout=120)
    assert out.returncode == 0, f"{out.stderr}\n{cluster.worker_log()}"
    return session, task_id, json.loads(out.stdout)


def board_status(cluster: Cluster, session: str, task_id: str) -> str:
    return json.loads(cluster.shelly("tasks", "get", task_id, "--session", session).stdout)["status"]


def entries(cluster: Cluster, session: str) -> list[dict[str, Any]]:
    """The delegate entries joined into the session's root run, in input order, without the usage
    a finished child's entry carries for its parent's tree total."""
    root = next(r for r in cluster.runs(session) if r["depth"] == "0")
    joined = cluster.redis.hgetall(Keys(cluster.prefix).run_children(root["id"]))
    out = [json.loads(v) for _, v in sorted(joined.items(), key=lambda kv: int(kv[0].rsplit(":", 1)[1]))]
    for e in out:
        e.pop("usage", None)
    return out


def user_messages(cluster: Cluster, run_id: str) -> list[str]:
    msgs = [json.loads(m) for m in cluster.redis.lrange(Keys(cluster.prefix).run_msgs(run_id), 0, -1)]
    return [p["text"] for m in msgs if m["role"] == "user" for p in m["parts"] if p["kind"] == "text"]


def test_handoff_on_the_pool_runs_the_peer_as_the_same_entry_and_its_completion_is_the_result(cluster: Cluster):
    cluster.write_config(
        [scripted(lead=[delegate_all(("planner", "code it")), "lead done"], planner=[handoff("coder")],
                  coder=[complete("coded it")])],
        [{"name": "lead", "options": {"max_delegation_depth": 1}},
         {"name": "planner", "options": {"max_handoffs": 3}},
         {"name": "coder"}],
    )
    cluster.start_worker("solo", concurrency=1)
    out = run_json(cluster, "ship it")
    assert out["reply"] == "lead done"
    assert entries(cluster, out["session"]) == [
        {"agent": "planner", "result": "coded it", "completion": {"status": "completed", "summary": "coded it"}}]
    runs = {r["agent"]: r for r in cluster.runs(out["session"])}
    assert runs["planner"]["status"] == "done" and runs["planner"]["handoff"] == runs["coder"]["id"]
    assert runs["coder"]["status"] == "done" and runs["coder"]["instance"].startswith("coder-")
    assert runs["coder"]["parent"] == runs["planner"]["parent"]
    assert user_messages(cluster, runs["coder"]["id"]) == [
        '<handoff_context>\nThis task was handed off to you by agent "planner".\nReason: needs coding\n\n'
        "plan ready\n</handoff_context>", "code it"]


def test_refused_handoffs_on_the_pool_are_entry_errors_with_shellys_texts(cluster: Cluster):
    cluster.write_config(
        [scripted(lead=[delegate_all(("ping", "bounce"), ("selfish", "stay"), ("lost", "wander")), "lead done"],
                  ping=[handoff("pong")], pong=[handoff("ping")], selfish=[handoff("selfish")],
                  lost=[handoff("ghost")])],
        [{"name": "lead", "options": {"max_delegation_depth": 1, "max_handoffs": 1}},
         {"name": "ping", "options": {"max_handoffs": 5}},
         {"name": "pong", "options": {"max_handoffs": 5}},
         {"name": "selfish", "options": {"max_handoffs": 5}},
         {"name": "lost", "options": {"max_handoffs": 5}}],
    )
    cluster.start_worker("solo", concurrency=1)
    out = run_json(cluster, "go")
    assert [e.get("error") for e in entries(cluster, out["session"])] == [
        'handoff chain limit (1) reached — cannot hand off to "ping"',
        'self-handoff is not allowed: "selfish" cannot hand off to itself',
        'handoff: agent "ghost" not found',
    ]


def test_the_peer_of_a_handoff_on_the_pool_re_claims_the_board_task(cluster: Cluster):
    cluster.write_config(
        [scripted(lead=["ready", {"tool_calls": [{"name": "delegate", "arguments": {"tasks": [
                            {"agent": "planner", "task": "code it", "context": "ctx", "task_id": "{task}"}]}}]},
                        "lead done"],
                  planner=[handoff("coder")], coder=[complete("coded it")])],
        [{"name": "lead", "toolboxes": ["tasks"], "options": {"max_delegation_depth": 1}},
         {"name": "planner", "toolboxes": ["tasks"], "options": {"max_handoffs": 3}},
         {"name": "coder", "toolboxes": ["tasks"]}],
    )
    cluster.start_worker("solo", concurrency=1)
    session, task_id, out = board_task_in_a_second_turn(cluster, "hello")
    assert out["reply"] == "lead done"
    task = json.loads(cluster.shelly("tasks", "get", task_id, "--session", session).stdout)
    coder = next(r for r in cluster.runs(session) if r["agent"] == "coder")
    assert (task["status"], task["assignee"]) == ("completed", coder["instance"])
