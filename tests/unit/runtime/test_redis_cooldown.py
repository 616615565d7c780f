"""The Redis cooldown store, on fakeredis and on the real Redis (atomic under concurrency)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import fakeredis
import pytest
import redis.asyncio as aioredis

from shelly_dist.runtime.redis_cooldown import RedisCooldownStore


@pytest.fixture(params=["fake", "real"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[aioredis.Redis]:
    if request.param == "fake":
        c: aioredis.Redis = fakeredis.FakeAsyncRedis()
    else:
        c = aioredis.Redis.from_url(request.getfixturevalue("redis_url"))
    yield c
    await c.aclose()


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    if "real" in request.node.callspec.id:
        return str(request.getfixturevalue("key_prefix"))
    return f"shelly-fake:{uuid.uuid4().hex[:8]}:"


async def test_failures_climb_the_ladder_and_reset_clears_it(client: aioredis.Redis, prefix: str) -> None:
    store = RedisCooldownStore(client, prefix=prefix)
    assert await store.cooling_until("p") == 0.0
    assert await store.record_failure("p", billing=False, now=1000.0) == 1060.0
    assert await store.record_failure("p", billing=False, now=2000.0) == 2300.0
    assert await store.cooling_until("p") == 2300.0
    await store.reset("p")
    assert await store.cooling_until("p") == 0.0
    assert await store.record_failure("p", billing=True, now=0.0) == 5 * 3600.0


async def test_a_transient_failure_never_shortens_a_billing_cooldown(client: aioredis.Redis, prefix: str) -> None:
    store = RedisCooldownStore(client, prefix=prefix)
    await store.record_failure("p", billing=True, now=0.0)
    assert await store.record_failure("p", billing=False, now=1.0) == 5 * 3600.0


async def test_concurrent_failures_each_climb_one_step(client: aioredis.Redis, prefix: str) -> None:
    stores = [RedisCooldownStore(client, prefix=prefix) for _ in range(4)]
    await asyncio.gather(*(s.record_failure("p", billing=False, now=0.0) for s in stores))
    assert await client.hget(f"{prefix}cooldown:p", "transient") == b"4"
    assert await stores[0].cooling_until("p") == 3600.0


async def test_the_record_expires_a_day_after_its_cooldown(client: aioredis.Redis, prefix: str) -> None:
    store = RedisCooldownStore(client, prefix=prefix)
    await store.record_failure("p", billing=False, now=0.0)
    ttl = await client.ttl(f"{prefix}cooldown:p")
    assert 24 * 3600 < ttl <= 24 * 3600 + 60
