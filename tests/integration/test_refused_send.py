"""A task the broker refuses is sent again on a reaper's next scan, not after ``requeue_after``
(issue 12) — real Redis, real ``shelly worker`` subprocesses, the worker's broker cut by a proxy."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from shelly_dist import Message, Role
from shelly_dist.runtime.base import RunOutcome
from shelly_dist.runtime.celery import CeleryRuntime, RuntimeSettings

from .cluster import BROKER_DB, Cluster, wait_until
from .support.proxy import TcpProxy
from .support.pyteam import build_registry, delegate_reply, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

REQUEUE_AFTER = 3600.0
"""An hour: what the run would wait for a resend without one on the next scan."""
LEAF_DELAY = 8.0
"""Seconds the leaf's model call takes: time for the test to cut its worker off the broker."""




async def test_a_resume_the_broker_refused_is_sent_again_on_a_reapers_next_scan(cluster: Cluster):
    """The worker that completes mid's join is cut off the broker: the send of mid's resume is
    refused. The refusal makes mid due at once, so a reaper sends the resume on its next scan; with
    ``requeue_after`` an hour, nothing else sends it within the test."""
    team = {
        "lead": {"replies": [delegate_reply("mid"), "lead done"], "max_delegation_depth": 2},
        "mid": {"replies": [delegate_reply("leaf"), "mid done"], "max_delegation_depth": 2},
        "leaf": {"replies": [{"text": "leaf result", "delay": LEAF_DELAY}]},
    }
    env = worker_env(cluster, team, requeue_after=str(REQUEUE_AFTER))
    proxy = TcpProxy(("127.0.0.1", int(cluster.broker_url.rsplit(":", 1)[1].split("/")[0]))).start()
    settings = RuntimeSettings(broker_url=cluster.broker_url, redis_url=cluster.redis_url, queue=cluster.queue,
                               key_prefix=cluster.prefix, requeue_after=REQUEUE_AFTER, poll_interval=0.2)
    runtime = CeleryRuntime(settings, "test-team")
    run: asyncio.Task[RunOutcome] | None = None
    try:
        w1 = cluster.start_worker("w1", env={**env, "SHELLY_TEST_BROKER": f"redis://127.0.0.1:{proxy.port}/{BROKER_DB}"})
        lead, go = build_registry(team).spawn("lead"), [Message.text("user", Role.USER, "go")]
        run = asyncio.create_task(runtime.execute(lead, go, session=uuid.uuid4().hex[:16]))
        leaf = await asyncio.to_thread(cluster.run_record, "leaf")
        await asyncio.to_thread(wait_until, lambda: cluster.redis.hget(leaf, "status") == "running", 60,
                                "the leaf's step to start on w1")
        proxy.cut()
        await asyncio.to_thread(wait_until, lambda: "did not take shelly.resume_agent" in cluster.logs[w1].read_text(),
                                60, "w1's broker to refuse mid's resume")
        cluster.start_worker("w2", env=env)  # on the broker; w1 still is not
        outcome = await asyncio.wait_for(run, 120)
    finally:
        if run is not None:
            run.cancel()
        await runtime.aclose()
        proxy.stop()
    assert outcome.reply.text_content() == "lead done", f"{outcome.reply}\n{cluster.worker_log()}"
