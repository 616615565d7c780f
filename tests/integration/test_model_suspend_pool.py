"""Suspended model calls on the pool (``SuspendModel``): a run whose model call must wait lets its
worker go (``waiting``, no slot held), and comes back on any worker when the call is due (the
reapers' due index) or when its reply is delivered from another process, exactly once (real
Redis, real ``shelly worker`` processes)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import pytest

from shelly_dist.chats import Message
from shelly_dist.models import Usage
from shelly_dist.redisio.connection import connect
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.children import model_waits

from .cluster import Cluster, delegate, scripted, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def team(cluster: Cluster, waiter: list[Any], children: int = 3) -> None:
    cluster.write_config(
        [scripted(lead=[delegate(*(("waiter", f"job {i}") for i in range(children))), "lead done"],
                  waiter=waiter)],
        [{"name": "lead", "options": {"max_delegation_depth": 1}}, {"name": "waiter"}],
    )


def waiter_records(cluster: Cluster) -> list[dict[str, str]]:
    keys = [k for k in cluster.redis.scan_iter(match=cluster.prefix + "run:*") if k.count(":") == 3]
    records = [cluster.redis.hgetall(k) for k in keys]
    return [r for r in records if r.get("agent") == "waiter"]


def finished(proc: subprocess.Popen[str], cluster: Cluster, timeout: float = 120) -> dict[str, Any]:
    stdout, stderr = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"stdout:{stdout}\nstderr:{stderr}\n{cluster.worker_log()}"
    return json.loads(stdout)


def test_children_whose_model_calls_wait_hold_no_worker_slot_and_go_on_when_due(cluster: Cluster) -> None:
    team(cluster, [{"tool_calls": [{"name": "task_complete", "arguments": {"status": "completed",
                                                                             "summary": "waited"}}],
                    "suspend": 6}])
    cluster.start_worker("solo", concurrency=1)
    proc = cluster.popen("run", "go", "--agent", "lead", "--json", "--quiet")
    try:
        # One slot, three children, each waiting 6 s: all three wait at once only if none holds it.
        def three_waiting() -> list[dict[str, str]] | None:
            assert proc.poll() is None, proc.communicate()
            found = [r for r in waiter_records(cluster) if r.get("status") == "waiting"]
            return found if len(found) == 3 else None

        waiting = wait_until(three_waiting, 60, "three children waiting at once")
        assert {r["waiting_for"] for r in waiting} == {'provider "team": scripted wait'}
        out = finished(proc, cluster)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert out["reply"] == "lead done"
    assert sorted(r["status"] for r in waiter_records(cluster)) == ["done"] * 3


def test_a_reply_delivered_from_another_process_answers_the_waiting_call_once(cluster: Cluster) -> None:
    team(cluster, [{"text": "never asked", "suspend": "reply"}], children=1)
    cluster.start_worker("solo", concurrency=2)
    proc = cluster.popen("run", "go", "--agent", "lead", "--json", "--quiet")
    try:
        record = wait_until(lambda: next((r for r in waiter_records(cluster) if r.get("status") == "waiting"), None),
                            60, "the child waiting for its reply")
        wait_id = json.loads(record["state"])["model_wait"]["id"]
        reply = Usage(input_tokens=11, output_tokens=4, cost_usd=0.25).attach(Message.model_validate(
            {"role": "assistant", "parts": [{"kind": "tool_call", "id": "c1", "name": "task_complete",
                                              "arguments": json.dumps({"status": "completed",
                                                                       "summary": "from the batch"})}]}))

        async def deliver_twice() -> list[str]:
            client = connect(cluster.redis_url)
            try:
                keys = Keys(cluster.prefix)
                outcomes = []
                for _ in range(2):
                    done = await model_waits.deliver(client, keys, record["id"], wait_id, reply, retention=3600,
                                                     requeue_after=1.0)
                    outcomes.append(done.outcome)
                return outcomes
            finally:
                await client.aclose()

        # No resume is sent from here: the delivery makes the run due, and a reaper resumes it.
        assert asyncio.run(deliver_twice()) == ["resume", "duplicate"]
        out = finished(proc, cluster)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert out["reply"] == "lead done"
    (child,) = waiter_records(cluster)
    assert child["status"] == "done"
    usage = json.loads(child["usage"])
    assert (usage["input_tokens"], usage["cost_usd"], usage["model_requests"]) == (11, 0.25, 1)
