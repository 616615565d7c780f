"""One config, one behaviour (DESIGN §3 rule 12): ``max_concurrency``, ``delegate_fail_fast``,
board cancel and loop detection on a real worker pool mean what they mean embedded (the embedded
specs: tests/unit/agent/test_delegate.py, test_delegate_board.py, test_step_machine.py)."""

from __future__ import annotations

import itertools
import json
import threading
from typing import Any

import pytest

from shelly_dist.redisio.keys import Keys
from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply, speaker

from .cluster import Cluster, delegate, scripted, wait_until
from .keys import assert_all_keys_have_ttl

pytestmark = pytest.mark.integration


def agent_of(req: RecordedRequest) -> str:
    """The config name of the agent that sent a request (its system prompt says "You are <name>")."""
    return speaker(req).split("-", 1)[0]


def mock(server: ModelServer) -> dict[str, Any]:
    return {"name": "mock", "kind": "openai", "model": "gpt-test", "base_url": server.url, "api_key": "k",
            "rate_limit": {"max_retries": 0}}


def lead_output(cluster: Cluster, session: str) -> list[dict[str, Any]]:
    """The lead's ``delegate`` result, from the session's events."""
    tool = next(e for e in cluster.events(session)
                if e["kind"] == "message_added" and e["data"].get("role") == "tool" and e["agent"] == "lead")
    return json.loads(tool["data"]["text"])


def run(cluster: Cluster, task: str, timeout: float = 150) -> dict[str, Any]:
    out = cluster.shelly("run", task, "--json", timeout=timeout)
    assert out.returncode == 0, f"{out.stdout}\n{out.stderr}\n{cluster.worker_log()}"
    return json.loads(out.stdout)


def test_max_concurrency_one_runs_three_instances_one_at_a_time_across_two_workers(cluster: Cluster):
    with ModelServer(format="openai", default=Reply(text="one job done", delay=1.0)) as server:
        cluster.write_config(
            [scripted("lead", lead=[delegate(("w", "job a"), ("w", "job b"), ("w", "job c")), "all done"]),
             mock(server)],
            [{"name": "lead", "provider": "lead", "options": {"max_delegation_depth": 1}},
             {"name": "w", "provider": "mock", "max_concurrency": 1}],
        )
        cluster.start_worker("w1")
        cluster.start_worker("w2")
        out = run(cluster, "three jobs")
        assert out["reply"] == "all done"
        spans = sorted((r.arrived, r.answered) for r in server.requests if agent_of(r) == "w")
    assert len(spans) == 3
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end, f"two instances of w ran at once: {spans}"
    assert_all_keys_have_ttl(cluster.redis, cluster.prefix)


def test_max_concurrency_slot_is_given_back_while_an_instance_waits_on_its_children(cluster: Cluster):
    # Each leaf answers only once both leaves are in flight: possible only if the first mid,
    # suspended on its leaf, no longer holds mid's single slot (as embedded).
    with ModelServer(format="openai", default=Reply(text="leaf done", hold_until=2)) as server:
        cluster.write_config(
            [scripted("team", lead=[delegate(("mid", "a"), ("mid", "b")), "all done"],
                      mid=[delegate(("leaf", "work")), "mid done"]), mock(server)],
            [{"name": "lead", "provider": "team", "options": {"max_delegation_depth": 2}},
             {"name": "mid", "provider": "team", "max_concurrency": 1, "options": {"max_delegation_depth": 2}},
             {"name": "leaf", "provider": "mock"}],
        )
        cluster.start_worker("w1")
        cluster.start_worker("w2")
        out = run(cluster, "nested")
        assert out["reply"] == "all done"
        assert [e.get("result") for e in lead_output(cluster, out["session"])] == ["mid done", "mid done"]


def test_max_concurrency_slot_of_a_worker_killed_with_kill_9_frees_itself(cluster: Cluster):
    first_in = threading.Event()

    def respond(req: RecordedRequest) -> Reply | None:
        if agent_of(req) == "w" and not first_in.is_set():
            first_in.set()
            return Reply(text="never in time", delay=120)  # the holder dies in this call
        return Reply(text="job done")

    with ModelServer(format="openai", responder=respond) as server:
        cluster.write_config(
            [scripted("lead", lead=[delegate(("w", "job a"), ("w", "job b")), "all done"]), mock(server)],
            [{"name": "lead", "provider": "lead", "options": {"max_delegation_depth": 1}},
             {"name": "w", "provider": "mock", "max_concurrency": 1}],
        )
        victim = cluster.start_worker("victim")
        coordinator = cluster.popen("run", "two jobs", "--json")
        try:
            wait_until(first_in.is_set, 60, "the first instance of w holding the slot")
            session = cluster.session_ids()[0]
            holder = next(r for r in cluster.runs(session) if r.get("status") == "running" and r.get("parent"))
            assert holder["worker"] == victim
            slots_key = Keys(cluster.prefix).agent_slots(session, "w")
            slots = cluster.redis.zrange(slots_key, 0, -1)
            assert slots == [holder["id"]], "the running instance holds the only slot"
            assert cluster.redis.ttl(slots_key) > 0
            cluster.kill_worker(victim)
            cluster.start_worker("survivor")
            # The other instance gets the dead holder's slot once its lease lapses (default lease).
            wait_until(lambda: sum(1 for r in server.requests if agent_of(r) == "w") >= 2, 90,
                       "the second instance of w to start after the holder died")
        finally:
            coordinator.kill()
            coordinator.wait(10)
    others = [r for r in cluster.runs(session) if r.get("parent") and r["id"] != holder["id"]]
    assert others and others[0]["worker"] != victim


def test_fail_fast_cancels_a_slow_remote_sibling_with_no_further_model_requests(cluster: Cluster):
    def respond(req: RecordedRequest) -> Reply | None:
        if agent_of(req) == "bad":  # fails only once the slow sibling's call is in flight
            return Reply(status=400, hold_until=2)
        return Reply(text="never in time", delay=60)

    with ModelServer(format="openai", responder=respond) as server:
        cluster.write_config(
            [scripted("lead", lead=[delegate(("slow", "take long"), ("bad", "fail")), "lead done"]), mock(server)],
            [{"name": "lead", "provider": "lead",
              "options": {"max_delegation_depth": 1, "delegate_fail_fast": True}},
             {"name": "slow", "provider": "mock"}, {"name": "bad", "provider": "mock"}],
        )
        cluster.start_worker("w1")
        cluster.start_worker("w2")
        out = run(cluster, "fail fast")
        assert out["reply"] == "lead done"
        entries = lead_output(cluster, out["session"])
        assert entries[0] == {"agent": "slow", "error": "canceled: sibling failed"}
        assert entries[1]["agent"] == "bad" and "400" in entries[1]["error"]
        slow_calls = [r for r in server.requests if agent_of(r) == "slow"]
    assert len(slow_calls) == 1, "the stopped sibling asked the model nothing more"
    statuses = {r["agent"]: r["status"] for r in cluster.runs(out["session"]) if r.get("parent")}
    assert statuses == {"slow": "canceled", "bad": "failed"}


def test_fail_fast_stops_a_sibling_waiting_on_its_own_child_and_that_child(cluster: Cluster):
    def respond(req: RecordedRequest) -> Reply | None:
        if agent_of(req) == "bad":  # fails once the waiting sibling's own child is in flight
            return Reply(status=400, hold_until=2)
        return Reply(text="never in time", delay=60)

    with ModelServer(format="openai", responder=respond) as server:
        cluster.write_config(
            [scripted("team", lead=[delegate(("mid", "split"), ("bad", "fail")), "lead done"],
                      mid=[delegate(("slow", "deep work")), "mid done"]), mock(server)],
            [{"name": "lead", "provider": "team",
              "options": {"max_delegation_depth": 2, "delegate_fail_fast": True}},
             {"name": "mid", "provider": "team", "options": {"max_delegation_depth": 2}},
             {"name": "slow", "provider": "mock"}, {"name": "bad", "provider": "mock"}],
        )
        cluster.start_worker("w1")
        cluster.start_worker("w2")
        out = run(cluster, "fail fast deep")
        assert out["reply"] == "lead done"
        assert lead_output(cluster, out["session"])[0] == {"agent": "mid", "error": "canceled: sibling failed"}
        assert sum(1 for r in server.requests if agent_of(r) == "slow") == 1
    statuses = {r["agent"]: r["status"] for r in cluster.runs(out["session"]) if r.get("parent")}
    assert statuses == {"mid": "canceled", "slow": "canceled", "bad": "failed"}
    assert_all_keys_have_ttl(cluster.redis, cluster.prefix)


def test_cancelling_the_board_task_stops_the_remote_child_working_on_it(cluster: Cluster):
    created: dict[str, str] = {}

    def respond(req: RecordedRequest) -> Reply | None:
        if agent_of(req) == "lead":
            if any(m.get("role") == "tool" for m in req.body["messages"]):
                return Reply(text="lead done")
            session = cluster.session_ids()[0]
            made = cluster.shelly("tasks", "create", "the job", "--session", session)
            assert made.returncode == 0, made.stderr
            created.update(id=json.loads(made.stdout)["id"], session=session)
            return Reply(tool_calls=[{"name": "delegate", "arguments": {"tasks": [
                {"agent": "slow", "task": "work on it", "context": "", "task_id": created["id"]}]}}])
        return Reply(text="never in time", delay=60)

    with ModelServer(format="openai", responder=respond) as server:
        cluster.write_config(
            [mock(server)],
            [{"name": "lead", "provider": "mock", "toolboxes": ["tasks"], "options": {"max_delegation_depth": 1}},
             {"name": "slow", "provider": "mock", "toolboxes": ["tasks"]}],
        )
        cluster.start_worker("w1")
        coordinator = cluster.popen("run", "board work", "--json")
        try:
            wait_until(lambda: any(agent_of(r) == "slow" for r in server.requests), 60, "the child's model call")
            cancel = cluster.shelly("tasks", "cancel", created["id"], "--session", created["session"])
            assert cancel.returncode == 0, cancel.stderr
            stdout, stderr = coordinator.communicate(timeout=50)
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
                coordinator.wait(10)
        assert coordinator.returncode == 0, f"{stderr}\n{cluster.worker_log()}"
        assert json.loads(stdout)["reply"] == "lead done"
        assert lead_output(cluster, created["session"]) == [{"agent": "slow", "error": "task canceled"}]
        assert sum(1 for r in server.requests if agent_of(r) == "slow") == 1
    task = json.loads(cluster.shelly("tasks", "get", created["id"], "--session", created["session"]).stdout)
    assert task["status"] == "canceled"


def test_loop_detection_counts_identical_calls_across_suspensions_on_the_pool(cluster: Cluster):
    again = {"tool_calls": [
        {"name": "list_agents", "arguments": {}},
        {"name": "delegate", "arguments": {"tasks": [{"agent": "helper", "task": "help", "context": ""}]}}]}
    cluster.write_config(
        [scripted(lead=[delegate(("looper", "loop")), "lead done"],
                  looper=[again, again, again, again, "looper finished"], helper=["helped"])],
        [{"name": "lead", "options": {"max_delegation_depth": 2}},
         {"name": "looper", "options": {"max_delegation_depth": 2}}, {"name": "helper"}],
        loop_detection={"warn_after": 1, "stop_after": 2},
    )
    cluster.start_worker("w1")
    cluster.start_worker("w2")
    out = run(cluster, "loop on the pool")
    entries = lead_output(cluster, out["session"])
    assert "loop detected: list_agents called 3 times" in entries[0].get("error", ""), entries
    looper = next(r for r in cluster.runs(out["session"]) if r["agent"] == "looper")
    assert looper["status"] == "failed"
