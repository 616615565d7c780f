"""The coordinator in-process against the real Redis, with no workers at all."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from typing import Any

import pytest

from shelly_dist import Message, Role
from shelly_dist.runtime.celery import CeleryRuntime, RuntimeSettings
from shelly_dist.runtime.celery.client import coordinator as coordinator_module
from shelly_dist.runtime.celery.journal import Journal

from .cluster import Cluster
from .support.pyteam import build_registry, worker_env

pytestmark = pytest.mark.integration


class Heard(logging.Handler):
    """Remembers warnings and signals the first one."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        self.first = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        self.first.set()


async def test_a_coordinator_whose_children_never_start_says_why_it_waits(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(coordinator_module, "NO_WORKER_HINT", 0.2)
    queue = f"nobody-listens-{uuid.uuid4().hex[:6]}"
    settings = RuntimeSettings(broker_url=redis_url.rsplit("/", 1)[0] + "/5", redis_url=redis_url, queue=queue,
                               key_prefix=key_prefix, poll_interval=0.1)
    team = {"lead": {"replies": [{"tool_calls": [{"name": "delegate", "arguments": {"tasks": [
        {"agent": "helper", "task": "t", "context": ""}]}}]}, "never"], "max_delegation_depth": 1},
        "helper": {"replies": ["x"]}}
    runtime = CeleryRuntime(settings, "fp")
    agent = build_registry(team).spawn("lead")
    heard = Heard()
    log = logging.getLogger(coordinator_module.__name__)
    log.addHandler(heard)
    run = asyncio.create_task(runtime.execute(agent, [Message.text("user", Role.USER, "go")], session="0" * 16))
    try:
        assert await asyncio.to_thread(heard.first.wait, 30), "no warning within 30 s"
        assert "no worker has started any of 1 children" in heard.messages[0] and queue in heard.messages[0]
        assert not run.done()
    finally:
        log.removeHandler(heard)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        import redis

        broker = redis.Redis.from_url(settings.broker_url)
        broker.delete(queue)
        broker.close()
        await runtime.aclose()


def counting_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], set[str]]]:
    """Every ``Journal.joined`` read of this process: the keys asked for, the entries found."""
    reads: list[tuple[list[str], set[str]]] = []
    joined = Journal.joined

    async def counted(self: Journal, run_id: str, root: str, keys: list[str]) -> tuple[dict[str, Any], bool]:
        got, canceled = await joined(self, run_id, root, keys)
        reads.append((list(keys), set(got)))
        return got, canceled

    monkeypatch.setattr(Journal, "joined", counted)
    return reads


async def fan_out(cluster: Cluster, n: int, *, poll_interval: float, delay: float = 0.2) -> str:
    """A lead delegating ``n`` children to a worker with one slot (they join one at a time)."""
    tasks = [{"agent": "helper", "task": f"part {i}", "context": ""} for i in range(n)]
    team = {"lead": {"replies": [{"tool_calls": [{"name": "delegate", "arguments": {"tasks": tasks}}]}, "lead done"],
                     "max_delegation_depth": 1},
            "helper": {"replies": [{"text": "part done", "delay": delay}]}}
    cluster.start_worker("w1", concurrency=1, env=worker_env(cluster, team))
    settings = RuntimeSettings(broker_url=cluster.broker_url, redis_url=cluster.redis_url, queue=cluster.queue,
                               key_prefix=cluster.prefix, poll_interval=poll_interval)
    runtime = CeleryRuntime(settings, "test-team")
    try:
        outcome = await asyncio.wait_for(
            runtime.execute(build_registry(team).spawn("lead"), [Message.text("user", Role.USER, "go")],
                            session=uuid.uuid4().hex[:16]), 120)
    finally:
        await runtime.aclose()
    return outcome.reply.text_content()


async def test_a_waiting_coordinator_reads_each_joined_entry_once(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
):
    """Children joining one at a time wake the coordinator (each join, and the poll ticks of a short
    poll interval); a read asks only for the entries still missing: an entry is written once, so
    parsing it again on every wake-up (the whole fan-out each time) was CPU per child growing with
    the fan-out."""
    reads = counting_reads(monkeypatch)
    assert await fan_out(cluster, 6, poll_interval=0.2, delay=0.5) == "lead done"
    assert sum(1 for _, got in reads if got) > 1, "the children joined before one read: nothing to check"
    seen: set[str] = set()
    for keys, got in reads:
        assert not seen & set(keys), f"asked again for entries already read: {sorted(seen & set(keys))}"
        seen |= got


async def test_a_fan_out_is_read_when_every_child_has_joined_not_on_each_join(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
):
    """Each join announces its entry (``child|<key>``): the coordinator reads once at first and once
    all six have been announced, not once per join (the poll interval is longer than the fan-out)."""
    reads = counting_reads(monkeypatch)
    assert await fan_out(cluster, 6, poll_interval=30.0) == "lead done"
    assert len(reads) <= 3, [sorted(got) for _, got in reads]
    assert sum(len(got) for _, got in reads) == 6
