"""``CeleryRuntime.submit`` with a run id: an idempotency key against the real Redis (no broker
needed: what it would send is recorded)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from shelly_dist.runtime.celery import CeleryRuntime, RuntimeSettings

pytestmark = pytest.mark.integration

SESSION = "0123456789abcdef"


@pytest.fixture
async def runtime(redis_url: str, key_prefix: str) -> AsyncIterator[tuple[CeleryRuntime, list[list[Any]]]]:
    settings = RuntimeSettings(broker_url=redis_url.rsplit("/", 1)[0] + "/5", redis_url=redis_url,
                               key_prefix=key_prefix)
    rt = CeleryRuntime(settings, "fp")
    sent: list[list[Any]] = []

    async def send(name: str, args: list[Any], kwargs: dict[str, Any]) -> None:
        sent.append(args)

    rt._send = send  # type: ignore[method-assign]
    yield rt, sent
    await rt.aclose()


async def test_a_run_id_is_created_and_sent_once_its_run_has_started(runtime: tuple[CeleryRuntime, list[list[Any]]]):
    rt, sent = runtime
    await rt.submit("a", "first", session=SESSION, run_id="item-run")
    await rt.client.hset(rt.journal.keys.run("item-run"), "status", "running")
    await rt.submit("a", "second", session=SESSION, run_id="item-run")
    assert sent == [["item-run", "item-run"]]
    assert (await rt.record("item-run")).task == "first"  # type: ignore[union-attr]


async def test_a_still_queued_run_is_sent_again_but_not_recreated(runtime: tuple[CeleryRuntime, list[list[Any]]]):
    rt, sent = runtime
    await rt.submit("a", "first", session=SESSION, run_id="lost-send")
    await rt.submit("a", "second", session=SESSION, run_id="lost-send")
    assert sent == [["lost-send", "lost-send"]] * 2
    assert (await rt.record("lost-send")).task == "first"  # type: ignore[union-attr]


async def test_waiting_for_a_root_reads_it_again_on_its_end_not_on_each_childs_join(
    runtime: tuple[CeleryRuntime, list[list[Any]]],
):
    """``wait`` listens on the run's ``ended`` channel: the joins of its children (a message each
    on ``changed``) do not make it re-read a record that grows with their results."""
    rt, _ = runtime
    run_id = await rt.submit("a", "go", session=SESSION, run_id="waited-root")
    journal = rt.journal
    reads, first = 0, asyncio.Event()
    roots = rt.roots()  # every wait of the process reads through it (client/roots.py)
    real = roots._pipelined

    async def counted(ids: list[str], *, status: bool) -> Any:
        nonlocal reads
        reads += 1
        first.set()
        return await real(ids, status=status)

    roots._pipelined = counted  # type: ignore[method-assign]
    waiting = asyncio.ensure_future(rt.wait(run_id, timeout=60))
    lease = (await journal.claim(run_id, run_id, "tok", "w0")).lease
    assert lease is not None
    await asyncio.wait_for(first.wait(), 30)  # wait() read the record once, then waits on its watch
    for i in range(50):
        await rt.client.publish(journal.keys.run_changed(run_id), f"child|call_1:{i}")
    await lease.finish("done", {"agent": "a", "result": "r"})
    record = await waiting
    assert record.status == "done"
    assert reads <= 3  # the first read, the end (and at most one poll tick in between)
