"""Leased slots behind ``max_concurrency``: the same contract in memory and in Redis."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import redis.asyncio as aioredis

from shelly_dist.agent.slots import Acquired, MemorySlots, SlotLease, Slots
from shelly_dist.redisio.keys import Keys
from shelly_dist.state.slots import RedisSlots


@pytest.fixture(params=["memory", "redis"])
async def slots(request: pytest.FixtureRequest) -> AsyncIterator[Slots]:
    if request.param == "memory":
        yield MemorySlots()
        return
    redis_url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("key_prefix")
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        yield RedisSlots(client, Keys(prefix))
    finally:
        await client.aclose()


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 10.0) -> None:
    """Re-check ``check`` until it holds; fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        await asyncio.sleep(0.02)


async def test_slots_admit_up_to_the_limit_then_refuse(slots: Slots):
    got = [await slots.try_acquire("s", "w", f"run{i}", 2, 30) for i in range(3)]
    assert got == [Acquired.NEW, Acquired.NEW, Acquired.FULL]


async def test_a_holder_acquiring_again_keeps_its_one_slot(slots: Slots):
    assert await slots.try_acquire("s", "w", "run1", 2, 30) == Acquired.NEW
    assert await slots.try_acquire("s", "w", "run1", 2, 30) == Acquired.HELD
    assert await slots.try_acquire("s", "w", "run2", 2, 30) == Acquired.NEW


async def test_a_released_slot_admits_the_next_holder(slots: Slots):
    await slots.try_acquire("s", "w", "run1", 1, 30)
    await slots.release("s", "w", "run1")
    assert await slots.try_acquire("s", "w", "run2", 1, 30) == Acquired.NEW


async def test_slots_are_per_session_and_agent(slots: Slots):
    await slots.try_acquire("s", "w", "run1", 1, 30)
    assert await slots.try_acquire("s", "other", "run2", 1, 30) == Acquired.NEW
    assert await slots.try_acquire("t", "w", "run3", 1, 30) == Acquired.NEW


async def test_a_holder_that_stops_renewing_loses_its_slot_when_its_lease_lapses(slots: Slots):
    assert await slots.try_acquire("s", "w", "dead", 1, 0.3) == Acquired.NEW
    assert await slots.try_acquire("s", "w", "next", 1, 30) == Acquired.FULL
    await eventually(lambda: _acquired(slots, "next"))
    assert not await slots.renew("s", "w", "dead", 30), "the lapsed holder cannot take its slot back by renewing"


async def _acquired(slots: Slots, holder: str) -> bool:
    return await slots.try_acquire("s", "w", holder, 1, 30) == Acquired.NEW


async def test_a_renewing_holder_keeps_its_slot_past_its_first_deadline(slots: Slots):
    got = await slots.try_acquire("s", "w", "live", 1, 1.2)
    async with SlotLease(slots, "s", "w", "live", got, 1.2):
        started = time.monotonic()
        while time.monotonic() - started < 3.0:  # several lease periods, renewed every third
            assert await slots.try_acquire("s", "w", "other", 1, 30) == Acquired.FULL
            await asyncio.sleep(0.05)
    assert await slots.try_acquire("s", "w", "other", 1, 30) == Acquired.NEW, "the lease gave its slot back"


async def test_memory_acquire_waits_for_a_release():
    slots = MemorySlots()
    await slots.try_acquire("s", "w", "first", 1, 30)
    waiter = asyncio.create_task(slots.acquire("s", "w", "second", 1, 30))
    await asyncio.sleep(0)
    assert not waiter.done()
    await slots.release("s", "w", "first")
    assert await asyncio.wait_for(waiter, 5) == Acquired.NEW


async def test_memory_acquire_takes_a_lapsed_holders_slot_without_a_release():
    now = [0.0]
    slots = MemorySlots(clock=lambda: now[0])
    await slots.try_acquire("s", "w", "dead", 1, 15)
    now[0] = 15.0
    assert await asyncio.wait_for(slots.acquire("s", "w", "next", 1, 15), 5) == Acquired.NEW


async def test_redis_slot_set_always_has_a_ttl(redis_url: str, key_prefix: str):
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        slots = RedisSlots(client, Keys(key_prefix))
        await slots.try_acquire("s", "w", "run1", 1, 15)
        assert await client.ttl(slots.key("s", "w")) > 15
        await slots.renew("s", "w", "run1", 15)
        assert await client.ttl(slots.key("s", "w")) > 15
    finally:
        await client.aclose()
