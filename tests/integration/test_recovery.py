"""Recovery without the broker (issue 12): leases, heartbeats, the reaper, rolling updates —
real Redis, real ``shelly worker`` subprocesses, DEFAULT lease and visibility settings unless a
setting is the subject of the test."""

from __future__ import annotations

import json
import sys
import threading

import pytest

from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply

from .cluster import BROKER_DB, Cluster, delegate, scripted, wait_until
from .support.proxy import TcpProxy

DEFAULTS = {"step_time_limit": 600, "visibility_timeout": None}
"""The shipped defaults (the cluster helper otherwise shortens both for speed)."""


pytestmark = pytest.mark.timeout(300)

LEAF_DELAY = 8.0
"""Seconds the leaf's model call takes: time for the test to cut its worker off the broker."""

def _turns(req: RecordedRequest) -> int:
    return sum(1 for m in req.body.get("messages", []) if m.get("role") == "assistant")


def _mock(server: ModelServer) -> dict[str, object]:
    return {"name": "mock", "kind": "openai", "model": "gpt-test", "base_url": server.url, "api_key": "k",
            "rate_limit": {"max_retries": 0}}




def test_killed_worker_run_continues_on_another_worker_on_default_settings(any_broker_cluster: Cluster):
    """``kill -9`` of the worker mid-step: its lease lapses and a reaper on the other worker
    re-enqueues the run in seconds, on either broker (before, the Redis broker waited for its
    visibility timeout: 15 minutes by default)."""
    cluster = any_broker_cluster
    first: list[RecordedRequest] = []
    killed = threading.Event()

    def respond(req: RecordedRequest) -> Reply:
        if _turns(req) == 0:
            first.append(req)
            return Reply(text="", tool_calls=[{"name": "not_a_tool", "arguments": {}}])
        if not killed.is_set():
            return Reply(text="too late", delay=120)  # in flight when its worker is killed
        return Reply(text="finished after the crash")

    with ModelServer(format="openai", responder=respond) as server:
        cluster.write_config(
            [scripted("lead", lead=[delegate(("slowpoke", "take your time")), "lead done"]), _mock(server)],
            [{"name": "lead", "provider": "lead", "options": {"max_delegation_depth": 1}},
             {"name": "slowpoke", "provider": "mock"}],
            distributed=DEFAULTS,
        )
        a, b = cluster.start_worker("wa"), cluster.start_worker("wb")
        coordinator = cluster.popen("run", "crash test", "--json")
        try:
            server.wait_for_requests(2, timeout=60)  # the child's second call is in flight
            child = cluster.run_record("slowpoke")
            holder = cluster.redis.hget(child, "worker")
            assert holder in (a, b)
            killed.set()
            cluster.kill_worker(holder)
            stdout, stderr = coordinator.communicate(timeout=120)
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
        assert coordinator.returncode == 0, f"{stderr}\n{cluster.worker_log()}"
        assert json.loads(stdout)["reply"] == "lead done"
        assert len(first) == 1, "the journaled first step must not call the model again"
        assert cluster.redis.hget(child, "worker") not in (holder, None)


def test_duplicate_delivery_of_a_long_run_repeats_no_model_request_and_no_tool(cluster: Cluster):
    """One task advances a run through many steps, longer than its lease; meanwhile the broker
    delivers the task again (as the Redis broker does past its visibility timeout). The heartbeat
    keeps the lease with the live worker, and the duplicate finds the run leased and is dropped: no
    model request and no tool call is repeated."""
    steps = 12
    ran = cluster.root / "tool-ran"
    requests: list[int] = []
    third = threading.Event()

    def respond(req: RecordedRequest) -> Reply:
        turn = _turns(req)
        requests.append(turn)
        if turn == 3:
            third.set()
        if turn < steps:
            return Reply(text="", delay=1.5, tool_calls=[{
                "name": "exec_run", "id": f"call_{turn}",
                "arguments": {"command": sys.executable,  # distinct calls: no loop detection
                              "args": ["-c", f"open({str(ran)!r}, 'a').write('{turn} ')"]}}])
        return Reply(text="long done")

    with ModelServer(format="openai", responder=respond) as server:
        cluster.write_config(
            [scripted("lead", lead=[delegate(("long", "keep going")), "lead done"]), _mock(server)],
            [{"name": "lead", "provider": "lead", "options": {"max_delegation_depth": 1}},
             {"name": "long", "provider": "mock", "toolboxes": ["exec"], "options": {"max_iterations": 50}}],
            permissions={"trusted_commands": [sys.executable]},
            distributed={"step_time_limit": 5, "visibility_timeout": 6},
        )
        cluster.start_worker("wa")
        cluster.start_worker("wb")
        coordinator = cluster.popen("run", "go long", "--json")
        try:
            assert third.wait(90), "the long run never reached its third step"
            record = cluster.redis.hgetall(cluster.run_record("long"))
            redeliver(cluster, record["id"], record["root"])
            stdout, stderr = coordinator.communicate(timeout=150)
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
    assert coordinator.returncode == 0, f"{stderr}\n{cluster.worker_log()}"
    assert json.loads(stdout)["reply"] == "lead done"
    assert sorted(requests) == list(range(steps + 1)), "a model request was repeated"
    assert ran.read_text().split() == [str(t) for t in range(steps)], "a tool ran twice"


def redeliver(cluster: Cluster, run_id: str, root: str) -> None:
    """Put the run's task on the queue again, as a broker redelivering it would."""
    from celery import Celery

    app = Celery("redeliver", broker=cluster.broker_url, set_as_current=False)
    try:
        app.send_task("shelly.run_agent", args=[run_id, root], queue=cluster.queue)
    finally:
        app.close()


def test_parent_whose_last_child_finished_but_whose_resume_was_never_sent_is_resumed(cluster: Cluster):
    """The worker that completes a join loses its broker before it can send the parent's resume,
    and is then killed: the parent's children have all joined, nobody will ever send that resume.
    The finish put the parent in its tree's deadline index, so a reaper sends it."""
    def respond(req: RecordedRequest) -> Reply:
        return Reply(text="leaf result", delay=LEAF_DELAY)  # meanwhile its worker is cut off the broker

    with ModelServer(format="openai", responder=respond) as server:
        cluster.write_config(
            [scripted("team", lead=[delegate(("mid", "organise")), "lead done"],
                      mid=[delegate(("leaf", "do it")), "mid done"]), _mock(server)],
            [{"name": "lead", "provider": "team", "options": {"max_delegation_depth": 2}},
             {"name": "mid", "provider": "team", "options": {"max_delegation_depth": 2}},
             {"name": "leaf", "provider": "mock"}],
            distributed=DEFAULTS,
        )
        proxy = TcpProxy(("127.0.0.1", int(cluster.broker_url.rsplit(":", 1)[1].split("/")[0]))).start()
        try:
            w1 = cluster.start_worker("w1", env={"SHELLY_BROKER_URL": f"redis://127.0.0.1:{proxy.port}/{BROKER_DB}"})
            coordinator = cluster.popen("run", "three levels", "--json")
            try:
                server.wait_for_requests(1, timeout=60)  # the leaf's model call is in flight on w1
                mid, leaf = cluster.run_record("mid"), cluster.run_record("leaf")
                proxy.cut()
                wait_until(lambda: cluster.redis.hget(leaf, "status") == "done", 60, "the leaf to finish")
                assert cluster.redis.hmget(mid, "status", "pending") == ["waiting", "0"]
                cluster.kill_worker(w1)  # the resume was never sent
                cluster.start_worker("w2")
                stdout, stderr = coordinator.communicate(timeout=180)
            finally:
                if coordinator.poll() is None:
                    coordinator.kill()
        finally:
            proxy.stop()
    assert coordinator.returncode == 0, f"{stderr}\n{cluster.worker_log()}"
    assert json.loads(stdout)["reply"] == "lead done"
    assert cluster.redis.hget(mid, "status") == "done"


def test_run_of_another_config_generation_is_left_for_a_worker_of_that_generation(cluster: Cluster):
    """A rolling update: the run was started by the old config while only a new-config worker is
    up; the old generation was seen a moment ago, so the new worker re-queues the run instead of
    failing it, and an old-config worker that comes back runs it."""
    old = cluster.write_config(
        [scripted(lead=[delegate(("helper", "help")), "lead done"], helper=["helped"])],
        [{"name": "lead", "options": {"max_delegation_depth": 1}}, {"name": "helper"}],
        distributed=DEFAULTS,
    )
    old_config = cluster.root / "old.yaml"
    old_config.write_text(old.read_text())
    first_old = cluster.start_worker("old1")  # registers the old generation, then is updated away
    old.write_text(old.read_text().replace("name: helper", "name: helper\n  description: updated", 1))
    new = cluster.start_worker("new")
    cluster.workers[first_old].terminate()
    cluster.workers[first_old].wait(30)
    coordinator = cluster.popen("run", "go", "--json", "--config", str(old_config))
    try:
        wait_until(lambda: "re-queued for its generation" in cluster.logs[new].read_text(), 60,
                   "the new worker to leave the old run for its generation")
        back = cluster.start_worker("old2", env={"SHELLY_CONFIG": str(old_config)})
        stdout, stderr = coordinator.communicate(timeout=120)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
    assert coordinator.returncode == 0, f"{stderr}\n{cluster.worker_log()}"
    out = json.loads(stdout)
    assert out["reply"] == "lead done"
    child = next(r for r in cluster.runs(out["session"]) if r["parent"])
    assert (child["status"], child["worker"]) == ("done", back)
