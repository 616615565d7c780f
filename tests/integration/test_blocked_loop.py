"""A step that blocks its worker's event loop keeps its run (issue 12/16): the lease is renewed
from the worker's renewer thread, not from the loop — real Redis, real ``shelly worker``
subprocesses, on a lease shortened to 2 s and on the shipped defaults (10 s lease, 600 s step limit)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from shelly_dist import Message, Role
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery import CeleryRuntime, RuntimeSettings

from .cluster import Cluster, wait_until
from .support.pyteam import build_registry, delegate_reply, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

DEFAULT_LEASE = RuntimeSettings(broker_url="", redis_url="").lease


@pytest.mark.parametrize(("lease", "block"), [
    pytest.param(2.0, 6.0, id="short-lease"),  # three leases
    pytest.param(DEFAULT_LEASE, 2 * DEFAULT_LEASE, id="default-lease"),  # the shipped settings (and step limit)
])
async def test_a_step_blocking_its_event_loop_for_longer_than_its_lease_runs_once_on_its_worker(
    cluster: Cluster, tmp_path: Path, lease: float, block: float
):
    """The tool holds the loop for ``block`` seconds, long past the lease: a heartbeat driven by
    the loop would let the lease lapse and the other worker's reaper re-run the step."""
    log = tmp_path / "block_loop.log"
    team = {
        "lead": {"replies": [delegate_reply("blocker"), "lead done"], "max_delegation_depth": 1},
        "blocker": {"replies": [{"tool_calls": [{"name": "block_loop", "arguments": {"seconds": block}}]}, "unblocked"],
                    "block_loop": True},
    }
    env = worker_env(cluster, team, lease=str(lease), step_limit="600", tool_log=str(log))
    cluster.start_worker("wa", env=env)
    cluster.start_worker("wb", env=env)  # whose reaper would take the run over if its lease lapsed
    settings = RuntimeSettings(broker_url=cluster.broker_url, redis_url=cluster.redis_url, queue=cluster.queue,
                               key_prefix=cluster.prefix, lease=lease, poll_interval=0.2)
    runtime = CeleryRuntime(settings, "test-team")
    try:
        outcome = await asyncio.wait_for(
            runtime.execute(build_registry(team).spawn("lead"), [Message.text("user", Role.USER, "go")],
                            session=uuid.uuid4().hex[:16]), 120)
    finally:
        await runtime.aclose()
    assert outcome.reply.text_content() == "lead done", f"{outcome.reply}\n{cluster.worker_log()}"
    assert len(log.read_text().split()) == 1, f"the tool ran more than once\n{cluster.worker_log()}"
    child = wait_until(lambda: next((k for k in cluster.redis.scan_iter(match=cluster.prefix + "run:*")
                                     if k.count(":") == 3 and cluster.redis.hget(k, "agent") == "blocker"), None),
                       10, "the blocker's run record")
    journal = cluster.redis.lrange(Keys(cluster.prefix).run_msgs(cluster.redis.hget(child, "id")), 0, -1)
    assert any(f"blocked the loop for {block:g}s" in m for m in journal), \
        f"the step was redone elsewhere: {journal}\n{cluster.worker_log()}"
