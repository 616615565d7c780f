"""``spawn`` on the pool, across real ``shelly worker`` processes: a parent on a worker waits for
its spawned children holding no worker, and a worker killed mid-child loses no announcement."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .cluster import Cluster, delegate, scripted, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def spawn(*tasks: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "spawn", "arguments": {"agent": "worker", "task": t}} for t in tasks]}




def _announcements(cluster: Cluster, record: str) -> list[str]:
    return cluster.redis.lrange(f"{record}:announce", 0, -1)


def _heard(cluster: Cluster, record: str) -> list[str]:
    """The announcement messages journaled in the run's chat."""
    texts = [json.loads(m)["parts"][0].get("text", "") for m in cluster.redis.lrange(f"{record}:msgs", 0, -1)]
    return [t for t in texts if t.startswith("[Spawn result")]


def test_a_run_on_a_worker_waits_for_its_spawned_children_holding_no_worker(cluster: Cluster) -> None:
    """The manager runs on a one-slot worker: had it held its slot while waiting, its children
    could never run."""
    cluster.write_config(
        [scripted(lead=[delegate(("manager", "organise")), "lead done"],
                  manager=[spawn("a", "b"), "waiting", "heard", "heard"], worker=["found {task}"])],
        [{"name": "lead", "options": {"max_delegation_depth": 2}},
         {"name": "manager", "options": {"max_delegation_depth": 2}}, {"name": "worker"}],
        entry_agent="lead")
    cluster.start_worker("w1", concurrency=1)
    out = cluster.shelly("run", "go", "--json", timeout=120)
    assert out.returncode == 0, f"{out.stderr}\n{cluster.worker_log()}"
    assert json.loads(out.stdout)["reply"] == "lead done"
    manager = cluster.run_record("manager")
    assert cluster.redis.hget(manager, "status") == "done"
    assert json.loads(cluster.redis.hget(manager, "result"))["result"] == "heard"
    heard = _heard(cluster, manager)
    assert sorted(h.rsplit("\n", 1)[1] for h in heard) == ["found a", "found b"]  # each once


def test_a_worker_killed_mid_child_still_yields_the_announcement(cluster: Cluster) -> None:
    gate = cluster.root / "gate"
    cluster.write_config(
        [scripted(lead=[spawn("slow"), "waiting", "heard"],
                  worker=[{"text": "found it", "until": str(gate)}])],
        [{"name": "lead", "options": {"max_delegation_depth": 1}}, {"name": "worker"}],
        entry_agent="lead")
    cluster.start_workers("wa", "wb")
    coordinator = cluster.popen("run", "go", "--json")
    try:
        child = cluster.run_record("worker")
        holder = wait_until(lambda: cluster.redis.hget(child, "worker"), 60, "the child claimed")
        cluster.kill_worker(holder)
        gate.touch()
        stdout, stderr = coordinator.communicate(timeout=120)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
    assert coordinator.returncode == 0, f"{stderr}\n{cluster.worker_log()}"
    assert json.loads(stdout)["reply"] == "heard"
    assert cluster.redis.hget(child, "worker") != holder  # it ended on the other worker
    lead = next(r for r in cluster.redis.scan_iter(match=cluster.prefix + "run:*")
                if r.count(":") == 3 and cluster.redis.hget(r, "agent") == "lead")
    (announced,) = _announcements(cluster, lead)
    assert json.loads(announced)["state"] == "completed"


def test_a_spawned_child_past_its_spawn_timeout_is_announced_as_failed(cluster: Cluster) -> None:
    cluster.write_config(
        [scripted(lead=[spawn("stuck"), "waiting", "heard"],
                  worker=[{"text": "never", "until": str(cluster.root / "never")}])],
        [{"name": "lead", "options": {"max_delegation_depth": 1, "spawn_timeout": 1}}, {"name": "worker"}],
        entry_agent="lead")
    cluster.start_worker("w1")
    out = cluster.shelly("run", "go", "--json", timeout=120)
    assert out.returncode == 0, f"{out.stderr}\n{cluster.worker_log()}"
    assert json.loads(out.stdout)["reply"] == "heard"
    (announced,) = _announcements(cluster, cluster.run_record("lead"))
    assert json.loads(announced)["error"] == "spawn: timed out after 1s"
    assert json.loads(announced)["state"] == "failed"


def test_shelly_run_exits_only_once_a_detached_child_has_ended(cluster: Cluster) -> None:
    cluster.write_config(
        [scripted(lead=[{"tool_calls": [{"name": "spawn", "arguments": {
                      "agent": "worker", "task": "background", "detach": True}}]}, "finished"],
                  worker=[{"text": "later", "delay": 3}])],
        [{"name": "lead", "options": {"max_delegation_depth": 1}}, {"name": "worker"}],
        entry_agent="lead")
    cluster.start_worker("w1")
    out = cluster.shelly("run", "go", "--json", timeout=120)
    assert out.returncode == 0, f"{out.stderr}\n{cluster.worker_log()}"
    assert json.loads(out.stdout)["reply"] == "finished"  # the lead did not wait for it
    assert cluster.redis.hget(cluster.run_record("worker"), "status") == "done"  # but the run did


def test_the_live_view_shows_each_spawned_childs_end_before_its_parent_hears_of_it(cluster: Cluster) -> None:
    cluster.write_config(
        [scripted(lead=[spawn("one", "two"), "waiting", "heard one", "heard both", "more"],
                  worker=[{"text": "did it", "delay": 1}])],
        [{"name": "lead", "options": {"max_delegation_depth": 1}}, {"name": "worker"}],
        entry_agent="lead")
    cluster.start_worker("w1")
    out = cluster.shelly("run", "go", timeout=120)
    assert out.returncode == 0, f"{out.stderr}\n{cluster.worker_log()}"
    lines = out.stderr.splitlines()
    done = [i for i, line in enumerate(lines) if "✔ worker-" in line and " done on " in line]
    heard = [i for i, line in enumerate(lines) if "⇠ heard worker" in line]
    assert len(done) == len(heard) == 2 and done[0] < heard[0] and done[1] < heard[1], out.stderr
