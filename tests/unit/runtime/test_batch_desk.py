"""A provider key's batch desk in Redis: joins are idempotent per ``custom_id``, the holder's writes
are fenced by its lock, a canceled request leaves the window or is counted in its flush."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from shelly_dist.models.batching.desk import Flush, Request
from shelly_dist.models.batching.work import Lost
from shelly_dist.redisio.connection import connect
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.children.batch_desk import RedisDesk, drop_runs


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[object]:
    c = connect(redis_url)
    yield c
    await c.aclose()


def desk(client: object, key_prefix: str, token: str = "") -> RedisDesk:
    return RedisDesk(client, Keys(key_prefix), "vendor.abc", 60, token)  # type: ignore[arg-type]


async def test_a_request_joins_once_and_a_second_join_finds_it(client: object, key_prefix: str) -> None:
    d = desk(client, key_prefix)
    who = Request(run="r1", session="s1", agent="a")
    assert await d.join("c1", who, "{}", due=0) == ("window", "", 1)
    assert await d.join("c1", who, "{}", due=0) == ("window", "", 1)
    assert (await d.window())[0] == 1


async def test_a_holder_whose_lock_was_taken_over_writes_nothing(client: object, key_prefix: str) -> None:
    first, second = desk(client, key_prefix, "one"), desk(client, key_prefix, "two")
    await first.join("c1", Request(run="r1", session="s1", agent="a"), "{}", due=0)
    assert await first.lock(0.05)
    assert await first.open("f1", 10) == ["c1"]
    await client.delete(first.key("lock"))  # type: ignore[attr-defined]  # lapsed
    assert await second.lock(10)
    with pytest.raises(Lost):
        await first.save("f1", Flush(cids=["c1"], state="polling", batch="b1"))
    assert (await second.flushes())["f1"].state == "open"


async def test_a_canceled_request_leaves_the_window_or_counts_against_its_flush(client: object,
                                                                                key_prefix: str) -> None:
    d = desk(client, key_prefix, "holder")
    for cid in ("c1", "c2"):
        await d.join(cid, Request(run=cid, session="s1", agent="a"), "{}", due=0)
    assert await d.lock(10) and await d.open("f1", 1) == ["c1"]
    assert await d.drop("c2") == "window" and (await d.window())[0] == 0
    assert await d.drop("c1") == "flush:f1" and await d.canceled("f1") == 1
    assert await d.drop("c1") == ""  # once


async def test_cancelling_a_tree_drops_the_requests_its_waiting_runs_joined(client: object, key_prefix: str) -> None:
    import json

    keys, d = Keys(key_prefix), desk(client, key_prefix)
    await d.join("c1", Request(run="r1", session="s1", agent="a"), "{}", due=0)
    wait = {"model_wait": {"id": "r1:0:1", "kind": "provider_batch",
                           "payload": {"desk": "vendor.abc", "custom_id": "c1"}}}
    await client.hset(keys.run("r1"), "state", json.dumps(wait))  # type: ignore[attr-defined]
    assert await drop_runs(client, keys, ["r1"], retention=60) == 1  # type: ignore[arg-type]
    assert (await d.window())[0] == 0


async def test_the_holder_reports_the_desk_to_prometheus(client: object, key_prefix: str) -> None:
    from prometheus_client import REGISTRY

    from shelly_dist.models.batching import BatchSettings
    from shelly_dist.models.batching.desk import ProviderDesk
    from shelly_dist.runtime.celery.worker.batch_runner import _gauges

    class Api:
        provider, vendor = "gauged", "openai"

    d = desk(client, key_prefix, "holder")
    for cid in ("c1", "c2", "c3"):
        await d.join(cid, Request(run=cid, session="s1", agent="a"), "{}", due=0)
    assert await d.lock(10) and await d.open("f1", 2) == ["c1", "c2"]
    await d.save("f1", Flush(cids=["c1", "c2"], state="polling", batch="b1"))
    await _gauges(ProviderDesk("vendor.abc", Api(), BatchSettings(), None, lambda r: r, "m"), d)  # type: ignore[arg-type]

    def value(name: str, **labels: str) -> float | None:
        return REGISTRY.get_sample_value(name, {"provider": "gauged", **labels})

    assert value("shelly_provider_batch_requests_pending", where="window") == 1
    assert value("shelly_provider_batch_requests_pending", where="sent") == 2
    assert value("shelly_provider_batches", status="polling") == 1
