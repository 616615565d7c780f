"""The worker as operators run it: the plain ``celery ... worker`` alternative, SIGTERM's warm
shutdown, the heartbeat file the probes read, and the preStop hook's ``cancel_consumer``.

Everything here runs real processes against the real Redis, exactly as the docs and manifests
invoke them (the commands are the ones in k8s/base/worker.yaml and docs/operations.md).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.ops.support import container, find, rendered

from .cluster import Cluster, delegate, scripted, wait_until
from .ops import CELERY, SHELLY, Processes, delegating_team, run_json

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PROBE = [sys.executable, "-m", "shelly_dist.runtime.heartbeat"]


def start_shelly_worker(procs: Processes, name: str, *, interval: float = 10.0) -> tuple[str, Path]:
    """``shelly worker`` as ``name@<cluster>`` with its own heartbeat file; waits until it beats."""
    cluster = procs.cluster
    hostname, beat = f"{name}@{cluster.id}", cluster.root / f"{name}.heartbeat"
    proc = procs.start(name, [*SHELLY, "worker", "--concurrency", "4", "--hostname", hostname,
                              "--heartbeat-file", str(beat), "--heartbeat-interval", str(interval)])
    wait_until(lambda: beat.exists() or proc.poll() is not None, 60, f"{name}'s first heartbeat")
    assert proc.poll() is None, f"{name} exited:\n{procs.log(name)}"
    return hostname, beat


def probe(beat: Path, max_age: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PROBE, "--file", str(beat), "--max-age", str(max_age)],
                          capture_output=True, text=True, timeout=30)


def run_started_on(cluster: Cluster, session: str, agent_prefix: str) -> list[str]:
    """The workers that started each run of agents named ``agent_prefix...`` in ``session``."""
    return [e["data"]["worker"] for e in cluster.events(session)
            if e["kind"] == "run_started" and e["agent"].startswith(agent_prefix)]


def child_record(cluster: Cluster, agent: str) -> dict[str, str] | None:
    for key in cluster.redis.scan_iter(match=cluster.prefix + "run:*"):
        if cluster.redis.type(key) == "hash" and cluster.redis.hget(key, "agent") == agent:
            return cluster.redis.hgetall(key)
    return None


# -- 2. the documented alternative: plain `celery -A shelly_dist.runtime.celery_app worker` -------


@pytest.mark.parametrize("pool", [[], ["--pool", "threads", "--concurrency", "4"]], ids=["prefork", "threads"])
def test_plain_celery_worker_reads_shelly_config_and_runs_a_delegation(
    cluster: Cluster, procs: Processes, pool: list[str]
):
    delegating_team(cluster)
    hostname = f"celery@{cluster.id}"
    config = str(cluster.root / ".shelly" / "config.yaml")
    # Another directory, so the config can only come from $SHELLY_CONFIG.
    elsewhere = cluster.root / "elsewhere"
    elsewhere.mkdir()
    procs.start("celery", [*CELERY, "--workdir", str(elsewhere), "worker", *pool, "--loglevel", "INFO",
                           "--hostname", hostname], env={"SHELLY_CONFIG": config})
    out = run_json(cluster, "investigate")
    assert out["reply"] == "lead done", procs.log("celery")
    assert run_started_on(cluster, out["session"], "helper") == [hostname]


# -- 3. SIGTERM: warm shutdown finishes the step in flight -----------------------------------------


def test_sigterm_lets_the_step_in_flight_finish_and_removes_the_heartbeat(cluster: Cluster, procs: Processes):
    delegating_team(cluster, child_delay=3)
    hostname, beat = start_shelly_worker(procs, "w1")
    coordinator = cluster.popen("run", "slow help", "--json")
    try:
        wait_until(lambda: (child_record(cluster, "helper") or {}).get("status") == "running", 60,
                   f"the helper's step to be running\n{procs.log('w1')}")
        assert procs.stop("w1", timeout=60) == 0, procs.log("w1")
        stdout, stderr = coordinator.communicate(timeout=60)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait(5)
    assert coordinator.returncode == 0, f"{stderr}\n{procs.log('w1')}"
    assert json.loads(stdout)["reply"] == "lead done"
    record = child_record(cluster, "helper")
    assert record is not None and record["status"] == "done" and record["worker"] == hostname
    assert not beat.exists(), "a stopped worker must not leave a heartbeat behind"
    log = (cluster.root / "w1.log").read_text()
    assert log.index("Warm shutdown") < log.index("succeeded"), "SIGTERM must land while the step runs"


# -- 4. the heartbeat of a real worker ---------------------------------------------------------


def _beat_ts(beat: Path) -> float | None:
    try:
        return float(json.loads(beat.read_text())["ts"])
    except (OSError, ValueError, KeyError):
        return None


def test_live_worker_refreshes_its_heartbeat_file(cluster: Cluster, procs: Processes):
    delegating_team(cluster)
    _, beat = start_shelly_worker(procs, "w1", interval=0.2)
    first = _beat_ts(beat)
    assert first is not None
    wait_until(lambda: (_beat_ts(beat) or 0) > first, 30, "a refreshed heartbeat")


def test_probe_passes_against_a_live_worker_and_fails_once_it_is_stopped(cluster: Cluster, procs: Processes):
    delegating_team(cluster)
    _, beat = start_shelly_worker(procs, "w1", interval=0.5)
    live = probe(beat, 60)
    assert live.returncode == 0, live.stderr
    assert procs.stop("w1") == 0
    stopped = probe(beat, 60)
    assert stopped.returncode == 1
    assert "no heartbeat file" in stopped.stderr


def test_probe_fails_once_a_killed_workers_heartbeat_goes_stale(cluster: Cluster, procs: Processes):
    delegating_team(cluster)
    _, beat = start_shelly_worker(procs, "w1", interval=0.2)
    procs.procs["w1"].kill()
    procs.procs["w1"].wait(10)
    assert beat.exists(), "SIGKILL leaves the file: only its age can tell"
    stale = wait_until(lambda: (r := probe(beat, 1)).returncode == 1 and r, 30, "the probe to fail")
    assert "stale" in stale.stderr


# -- 5. the preStop hook: cancel_consumer stops the worker taking tasks ----------------------------


def active_queues(hostname: str, procs: Processes) -> list[str]:
    out = subprocess.run([*CELERY, "inspect", "active_queues", "--destination", hostname, "--json",
                          "--timeout", "10"], cwd=procs.cluster.root, env=procs.cluster.env(),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return [q["name"] for q in json.loads(out.stdout)[hostname]]


def prestop_command(queue: str) -> str:
    """The worker's preStop shell command from the rendered base manifest, for this cluster's
    queue, with ``celery`` run by this interpreter (the image has it on PATH; the test may not)."""
    worker = container(find(rendered("base"), "Deployment", "shelly-worker"), "worker")
    command = worker["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["sh", "-c"] and command[2].startswith("celery -A shelly_dist.runtime.celery_app ")
    manifest_queue = worker["args"][worker["args"].index("--queues") + 1]
    line = command[2].replace(f"cancel_consumer {manifest_queue} ", f"cancel_consumer {queue} ", 1)
    assert line != command[2], "the preStop must cancel the queue the worker consumes (--queues)"
    return line.replace("celery", f"{shlex.quote(sys.executable)} -m celery", 1)


def test_prestop_cancel_consumer_stops_the_worker_taking_tasks(cluster: Cluster, procs: Processes):
    cluster.write_config(
        [scripted(lead=[delegate(*[("helper", f"part {i}") for i in range(4)]), "lead done"],
                  helper=[{"tool_calls": [{"name": "task_complete", "arguments": {
                      "status": "completed", "summary": "done {task}"}}]}])],
        [{"name": "lead", "options": {"max_delegation_depth": 1}}, {"name": "helper"}],
    )
    # Named like a pod's worker: --hostname shelly@$(POD_NAME), with POD_NAME = the cluster id.
    draining, _ = start_shelly_worker(procs, "shelly")
    assert active_queues(draining, procs) == [cluster.queue]
    hook = subprocess.run(["sh", "-c", prestop_command(cluster.queue)], cwd=cluster.root,
                          env={**cluster.env(), "POD_NAME": cluster.id}, capture_output=True, text=True, timeout=60)
    assert hook.returncode == 0 and "no longer consuming" in hook.stdout + hook.stderr, hook.stdout + hook.stderr
    assert active_queues(draining, procs) == []
    taker, _ = start_shelly_worker(procs, "taker")
    out = run_json(cluster, "split it")
    assert out["reply"] == "lead done"
    assert run_started_on(cluster, out["session"], "helper") == [taker] * 4
    assert procs.procs["shelly"].poll() is None, "cancelling the consumer must not stop the worker"
