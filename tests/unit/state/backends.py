"""Backends the contract suites run against: in memory, fakeredis, and the real Redis.

Each Redis-backed store or board gets its own key prefix (the real Redis through the
``key_prefix`` fixture, which deletes its keys afterwards) and its client is closed at the end.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import fakeredis
import pytest
import redis.asyncio as aioredis

from shelly_dist.redisio.connection import connect
from shelly_dist.redisio.keys import Keys

BACKENDS = ["memory", "fakeredis", "redis"]
REDIS_BACKENDS = ["fakeredis", "redis"]
POLL = 0.2
"""Poll interval of Redis-backed watches in tests: small, so a lost hint would show as a delay."""


@asynccontextmanager
async def redis_backend(request: pytest.FixtureRequest, kind: str) -> AsyncIterator[tuple[aioredis.Redis, Keys]]:
    """A client and a key layout for ``kind`` ("fakeredis" or "redis")."""
    if kind == "fakeredis":
        client: aioredis.Redis = fakeredis.aioredis.FakeRedis(server=fakeredis.FakeServer(), decode_responses=True)
        keys = Keys("shelly-fake:")
    else:
        client = connect(request.getfixturevalue("redis_url"))
        keys = Keys(request.getfixturevalue("key_prefix"))
    try:
        yield client, keys
    finally:
        await client.aclose()
