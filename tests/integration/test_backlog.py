"""Children queued behind slow model calls are late, not lost (issue 22, item 5): a fan-out wider
than the pool waits in the broker's queue past ``requeue_after`` without the reapers re-sending a
single child — real Redis, a real one-slot ``shelly worker``."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from shelly_dist import Message, Role
from shelly_dist.runtime.celery import CeleryRuntime, RuntimeSettings

from .cluster import Cluster
from .support.pyteam import build_registry, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CHILDREN = 4
STEP = 2.5
"""Seconds each child's model call takes: the last child waits about 3 × STEP in the queue."""
REQUEUE_AFTER = 1.0
"""Far less than that wait: a child still queued after it used to be re-sent as lost."""


async def test_children_queued_behind_slow_model_calls_are_not_re_sent_as_lost(cluster: Cluster):
    tasks = [{"agent": "leaf", "task": f"job {i}", "context": ""} for i in range(CHILDREN)]
    team = {
        "lead": {"replies": [{"tool_calls": [{"name": "delegate", "arguments": {"tasks": tasks}}]}, "lead done"],
                 "max_delegation_depth": 1},
        "leaf": {"replies": [{"text": "leaf result", "delay": STEP}]},
    }
    env = worker_env(cluster, team, requeue_after=str(REQUEUE_AFTER))
    settings = RuntimeSettings(broker_url=cluster.broker_url, redis_url=cluster.redis_url, queue=cluster.queue,
                               key_prefix=cluster.prefix, requeue_after=REQUEUE_AFTER, poll_interval=0.2)
    runtime = CeleryRuntime(settings, "test-team")
    try:
        worker = cluster.start_worker("w1", concurrency=1, env=env)
        lead, go = build_registry(team).spawn("lead"), [Message.text("user", Role.USER, "go")]
        outcome = await asyncio.wait_for(runtime.execute(lead, go, session=uuid.uuid4().hex[:16]), 120)
    finally:
        await runtime.aclose()
    assert outcome.reply.text_content() == "lead done", cluster.worker_log()
    log = cluster.logs[worker].read_text()
    assert "past its deadline; re-enqueued" not in log, log[-3000:]
    leaves = [cluster.redis.hgetall(k) for k in cluster.redis.scan_iter(match=cluster.prefix + "run:*")
              if k.count(":") == 3 and cluster.redis.hget(k, "agent") == "leaf"]
    waited = max(float(r["ended"]) - float(r["created"]) - STEP for r in leaves)
    assert len(leaves) == CHILDREN and waited > REQUEUE_AFTER + 2 * 2.5, f"the last child waited only {waited:.1f}s"
