"""The pool's delegation policy: sibling stops in Redis, and the id arithmetic they rely on."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from shelly_dist.agent import ChildRequest, DelegateEntry
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.children.policy import PoolPolicy, sibling_run_id
from shelly_dist.runtime.celery.journal import child_key, child_run_id


def request(index: int, call: str = "call_1") -> ChildRequest:
    return ChildRequest(key=f"{call}:{index}", tool_call_id=call, index=index, agent="w", task="t", depth=1,
                        visited=["lead", "w"], parent_run_id="p", parent_agent="lead", fail_fast=True)


def test_sibling_run_id_is_the_journals_child_run_id():
    r = request(2)
    assert sibling_run_id("parent1", child_key(r, 3)) == child_run_id("parent1", r, 3)


@pytest.fixture
async def pool(redis_url: str, key_prefix: str) -> AsyncIterator[tuple[PoolPolicy, aioredis.Redis, Keys]]:
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    keys = Keys(key_prefix)
    try:
        yield PoolPolicy(client, keys), client, keys
    finally:
        await client.aclose()


async def _children(client: aioredis.Redis, keys: Keys, statuses: dict[str, str]) -> dict[str, dict[str, str]]:
    """Register children of parent ``p`` at iteration 1 (call_1:0.. plus one of another call)."""
    out = {}
    for key, status in statuses.items():
        cid = sibling_run_id("p", key)
        record = {"id": cid, "parent": "p", "parent_key": key, "status": status, "agent": "w"}
        await client.hset(keys.run(cid), mapping=record)
        await client.sadd(keys.run_expected("p"), key)
        out[key] = record
    return out


async def test_a_failed_child_stops_its_unfinished_siblings_of_the_same_call_only(pool):
    policy, client, keys = pool
    kids = await _children(client, keys, {"1:call_1:0": "running", "1:call_1:1": "queued", "1:call_1:2": "done",
                                          "1:call_2:0": "running", "0:call_1:3": "running"})
    stopped = await policy.stop_siblings("p", "1:call_1:0")
    assert stopped == [kids["1:call_1:1"]["id"]]
    assert await client.hget(keys.run(kids["1:call_1:1"]["id"]), "stop") == "canceled: sibling failed"
    for other in ("1:call_1:2", "1:call_2:0", "0:call_1:3"):
        assert await client.hget(keys.run(kids[other]["id"]), "stop") is None


async def test_a_stopped_sibling_waiting_on_its_own_children_takes_them_with_it(pool):
    policy, client, keys = pool
    kids = await _children(client, keys, {"1:call_1:0": "failed", "1:call_1:1": "waiting"})
    waiting = kids["1:call_1:1"]["id"]
    grandchild = sibling_run_id(waiting, "1:call_9:0")
    await client.hset(keys.run(grandchild), mapping={"id": grandchild, "parent": waiting, "status": "running"})
    await client.sadd(keys.run_expected(waiting), "1:call_9:0")
    assert await policy.stop_siblings("p", "1:call_1:0") == [waiting, grandchild]
    assert await client.hget(keys.run(grandchild), "stop") == "canceled: sibling failed"


async def test_only_a_fail_fast_childs_failure_stops_siblings(pool):
    policy, client, keys = pool
    kids = await _children(client, keys, {"1:call_1:0": "running", "1:call_1:1": "running"})
    failed = DelegateEntry(agent="w", error="boom")
    not_fail_fast = request(0).model_copy(update={"fail_fast": False}).model_dump_json()
    await policy.on_end("p", "1:call_1:0", not_fail_fast, failed)
    assert await client.hget(keys.run(kids["1:call_1:1"]["id"]), "stop") is None
    await policy.on_end("p", "1:call_1:0", request(0).model_dump_json(), failed)
    assert await client.hget(keys.run(kids["1:call_1:1"]["id"]), "stop") == "canceled: sibling failed"
