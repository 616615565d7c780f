"""A task message a worker had received but not claimed when it was killed with ``kill -9`` is
carried on within about a lease (issue 41), on default settings: not by the broker after its
visibility timeout (900 s here, the runtime's default step limit plus grace), which is when
Redis' transport restores a dead consumer's unacknowledged message.

The received-but-unclaimed message is made deterministic with ``max_concurrency: 1``: of two
instances of ``w``, the second finds the slot taken and goes back for a retry's countdown, which
Celery holds in the worker that received it (unacknowledged), while the first waits on a model
call that only answers after the kill."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply, speaker

from .cluster import DEFAULT_TIMING, Cluster, delegate, scripted, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

RECOVERY_BOUND = 45.0
"""Seconds from the kill to the end of the whole tree (the issue's target on default settings:
a lease, 10 s, plus the reaper's scan, plus the replacement worker's start)."""


def _task_of(req: RecordedRequest) -> str:
    return "b" if "job b" in json.dumps(req.body) else "a"


def _write(cluster: Cluster, server: ModelServer) -> None:
    cluster.write_config(
        [scripted("lead", lead=[delegate(("w", "job a"), ("w", "job b")), "all done"]),
         {"name": "mock", "kind": "openai", "model": "gpt-test", "base_url": server.url, "api_key": "k",
          "rate_limit": {"max_retries": 0}}],
        [{"name": "lead", "provider": "lead", "options": {"max_delegation_depth": 1}},
         {"name": "w", "provider": "mock", "max_concurrency": 1}],
        distributed=dict(DEFAULT_TIMING),
    )


def _the_waiting_w(cluster: Cluster) -> str | None:
    """The record key of the ``w`` instance that has not reached the model (still ``queued``)."""
    for key in cluster.redis.scan_iter(match=cluster.prefix + "run:*"):
        if key.count(":") == 3 and cluster.redis.type(key) == "hash":
            record: dict[str, Any] = cluster.redis.hgetall(key)
            if record.get("agent") == "w" and record.get("status") == "queued":
                return str(key)
    return None


def _kill_while_one_is_received_and_one_is_running(cluster: Cluster) -> None:
    first_call = threading.Event()

    def respond(req: RecordedRequest) -> Reply:
        if speaker(req).startswith("w") and not first_call.is_set():
            first_call.set()
            return Reply(text="too late", delay=120)  # the worker holding it is killed meanwhile
        return Reply(text=f"done {_task_of(req)}")

    with ModelServer(format="openai", responder=respond) as server:
        _write(cluster, server)
        doomed = cluster.start_worker("wa", concurrency=4)
        coordinator = cluster.popen("run", "two jobs", "--json")
        try:
            wait_until(first_call.is_set, 60, "the first w's model call")
            waiting = wait_until(lambda: _the_waiting_w(cluster), 30, "the second w, queued behind the slot")
            received = f"{waiting}:received"  # Keys.run_received
            wait_until(lambda: cluster.redis.exists(received), 30, "the second w's message marked received")
            cluster.kill_worker(doomed)
            killed = time.monotonic()
            cluster.start_worker("wb", concurrency=4)
            stdout, stderr = coordinator.communicate(timeout=RECOVERY_BOUND + 60)
            took = time.monotonic() - killed
            print(f"recovered {took:.1f}s after the kill")
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
        assert coordinator.returncode == 0, f"{stderr}\n{cluster.worker_log()}"
        assert json.loads(stdout)["reply"] == "all done"
        assert took <= RECOVERY_BOUND, f"the tree ended {took:.1f}s after the kill\n{cluster.worker_log()}"
        w_calls = [_task_of(r) for r in server.requests if speaker(r).startswith("w")]
    # the job whose call the kill cut: that call and its redo; the other, once, by the worker that took it over
    assert sorted(w_calls.count(job) for job in ("a", "b")) == [1, 2], w_calls


def test_a_received_unclaimed_task_of_a_killed_worker_goes_on_within_a_lease_on_redis(cluster: Cluster) -> None:
    _kill_while_one_is_received_and_one_is_running(cluster)


def test_a_received_unclaimed_task_of_a_killed_worker_goes_on_within_a_lease_on_rabbitmq(
    rabbit_cluster: Cluster,
) -> None:
    _kill_while_one_is_received_and_one_is_running(rabbit_cluster)
