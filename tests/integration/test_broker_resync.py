"""A task the broker lost with a broken consumer connection is sent again soon after the worker's
consumer reconnects, not after the backstop ``max(visibility_timeout, requeue_after)`` — real
Redis, a real ``shelly worker`` whose broker connection goes through a proxy the test cuts.

The loss, as a chaos test met it: Redis killed while a consumer's ``BRPOP`` reply was on its way.
Redis had removed the message; nobody held it. Here the test takes the message off the queue
itself while the worker's broker connection is cut (what that ``BRPOP`` did), then heals the cut.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import redis

from shelly_dist import Message, Role
from shelly_dist.runtime.base import RunOutcome
from shelly_dist.runtime.celery import CeleryRuntime, RuntimeSettings

from .cluster import Cluster, wait_until
from .support.proxy import TcpProxy
from .support.pyteam import build_registry, delegate_reply, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

REQUEUE_AFTER = 10.0
"""Long enough that the coordinator records its send (SENT) before a reaper could find the leaf due."""
VISIBILITY = 3600.0
"""An hour: the backstop the lost task's run would otherwise wait for."""




def _backstopped(cluster: Cluster, record: str) -> bool:
    """Whether the run's send was recorded: its deadline is the backstop, far beyond requeue_after."""
    run_id, root = cluster.redis.hget(record, "id"), cluster.redis.hget(record, "root")
    score = cluster.redis.zscore(f"{cluster.prefix}run:{{{root}}}:deadlines", run_id)
    return score is not None and score > (time.time() + 10 * REQUEUE_AFTER) * 1000


async def test_a_task_lost_with_a_broken_consumer_connection_is_sent_again_after_the_reconnect(cluster: Cluster):
    team = {"lead": {"replies": [delegate_reply("leaf"), "lead done"], "max_delegation_depth": 1},
            "leaf": {"replies": ["leaf result"]}}
    env = worker_env(cluster, team, requeue_after=str(REQUEUE_AFTER), visibility=str(VISIBILITY))
    host_port, db = cluster.broker_url.rsplit("/", 1)
    proxy = TcpProxy(("127.0.0.1", int(host_port.rsplit(":", 1)[1]))).start()
    broker = redis.Redis.from_url(cluster.broker_url, decode_responses=True)
    settings = RuntimeSettings(broker_url=cluster.broker_url, redis_url=cluster.redis_url, queue=cluster.queue,
                               key_prefix=cluster.prefix, requeue_after=REQUEUE_AFTER,
                               visibility_timeout=VISIBILITY, poll_interval=0.2)
    runtime = CeleryRuntime(settings, "test-team")
    run: asyncio.Task[RunOutcome] | None = None
    try:
        w1 = cluster.start_worker("w1", env={**env, "SHELLY_TEST_BROKER": f"redis://127.0.0.1:{proxy.port}/{db}"})
        proxy.cut()  # w1's consumer is off the broker (its reconnects are refused) until heal()
        lead, go = build_registry(team).spawn("lead"), [Message.text("user", Role.USER, "go")]
        run = asyncio.create_task(runtime.execute(lead, go, session=uuid.uuid4().hex[:16]))
        leaf = await asyncio.to_thread(cluster.run_record, "leaf")
        lost = await asyncio.to_thread(wait_until, lambda: broker.rpop(cluster.queue), 60,
                                       "the leaf's task in the queue")
        assert "shelly.run_agent" in lost
        await asyncio.to_thread(wait_until, lambda: _backstopped(cluster, leaf), 60, "the leaf's send to be recorded")
        proxy.heal()  # w1's consumer reconnects: the leaf is sent again requeue_after later, not in an hour
        try:
            outcome = await asyncio.wait_for(run, 90)
        except TimeoutError:
            raise AssertionError(f"the lost task was not sent again:\n{cluster.logs[w1].read_text()[-3000:]}") from None
    finally:
        if run is not None:
            run.cancel()
        await runtime.aclose()
        proxy.stop()
        broker.close()
    assert outcome.reply.text_content() == "lead done", f"{outcome.reply}\n{cluster.worker_log()}"
    assert cluster.redis.hget(leaf, "status") == "done"
