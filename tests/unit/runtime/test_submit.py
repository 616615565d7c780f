"""Submitting a root run to the pool outlasts a short outage: a Redis that does not answer for a
moment is waited out, and a broker that does not take the task leaves the run recorded and queued,
with its deadline, for a worker's reaper to send (fakeredis; the broker is a stub that refuses)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest
from kombu.exceptions import OperationalError
from redis.exceptions import ConnectionError as RedisConnectionError

from shelly_dist.errors import StoreError
from shelly_dist.runtime.celery.broker import KombuSend
from shelly_dist.runtime.celery.client import coordinator
from shelly_dist.runtime.celery.client.coordinator import CeleryRuntime
from shelly_dist.runtime.celery.journal import Journal
from shelly_dist.runtime.celery.settings import RuntimeSettings


@pytest.fixture
async def runtime(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[CeleryRuntime]:
    # The broker answered when the coordinator started using it (its first-run check); each test
    # says what it does afterwards.
    monkeypatch.setattr(coordinator, "ensure_broker", lambda app: None)
    settings = RuntimeSettings(broker_url="redis://127.0.0.1:1/0", redis_url="redis://127.0.0.1:1/0",
                               key_prefix=f"t:{uuid.uuid4().hex[:6]}:")
    rt = CeleryRuntime(settings, "fp")
    rt.sender = KombuSend(rt.app, settings.queue)  # through app.send_task, which each test stubs
    await rt.client.aclose()
    rt.client = fakeredis.FakeAsyncRedis(decode_responses=True)
    rt.journal = Journal(rt.client, settings)
    yield rt
    await rt.client.aclose()


def refusing_broker(*_: Any, **__: Any) -> None:
    raise OperationalError("[Errno 111] Connection refused")


async def test_a_submit_the_broker_refuses_leaves_the_run_queued_for_the_reapers(runtime: CeleryRuntime) -> None:
    runtime.app.send_task = refusing_broker  # type: ignore[method-assign]
    run_id = await runtime.submit("lead", "go", session="s", run_id="item1")
    assert run_id == "item1"
    assert (await runtime.journal.fields("item1"))["status"] == "queued"
    deadlines = runtime.journal.keys.tree_deadlines("item1")
    assert await runtime.client.zscore(deadlines, "item1") is not None, "the reapers re-send it when due"


async def test_a_submit_the_broker_refuses_is_due_for_the_reapers_next_scan(runtime: CeleryRuntime) -> None:
    """Not after ``requeue_after`` (30 s): a broker blip costs a reaper interval."""
    runtime.app.send_task = refusing_broker  # type: ignore[method-assign]
    await runtime.submit("lead", "go", session="s", run_id="item3")
    due = await runtime.client.zscore(runtime.journal.keys.tree_deadlines("item3"), "item3")
    assert due is not None and due / 1000 <= time.time(), "due now, not after requeue_after"


async def test_a_submit_waits_out_a_redis_that_does_not_answer_for_a_moment(runtime: CeleryRuntime) -> None:
    sent: list[str] = []
    runtime.app.send_task = lambda name, **kw: sent.append(kw["args"][0])  # type: ignore[method-assign]
    create, failures = runtime.journal.create_root, [2]

    async def flaky(*args: Any, **kwargs: Any) -> bool:
        if failures[0]:
            failures[0] -= 1
            raise StoreError("journal: Redis refused the connection") from RedisConnectionError("refused")
        return await create(*args, **kwargs)

    runtime.journal.create_root = flaky  # type: ignore[method-assign]
    assert await runtime.submit("lead", "go", session="s", run_id="item2") == "item2"
    assert sent == ["item2"]
    assert (await runtime.journal.fields("item2"))["status"] == "queued"


async def test_a_broker_unreachable_before_the_first_run_fails_it_writing_nothing(
    runtime: CeleryRuntime, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(coordinator, "ensure_broker", refusing_broker)
    with pytest.raises(OperationalError, match="Connection refused"):
        await runtime.submit("lead", "go", session="s", run_id="item1")
    assert await runtime.journal.fields("item1") == {}
