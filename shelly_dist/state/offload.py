"""Offloaded tool results in Redis: one hash per session, so a ``recall`` on any worker finds what
an ``offload`` effect on another worker stored. The hash carries the retention TTL, refreshed on
every write."""

from __future__ import annotations

import redis.asyncio as aioredis

from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import DEFAULT_RETENTION, Keys


class RedisOffloadStore:
    """The ``OffloadStore`` of one session (:mod:`shelly_dist.agent.effects.offload`)."""

    def __init__(self, client: aioredis.Redis, keys: Keys, *, session: str, retention: int = DEFAULT_RETENTION) -> None:
        self.client = client
        self.key = keys.offload(session)
        self.retention = retention

    async def put(self, key: str, text: str) -> None:
        with redis_errors("offload", key=key):
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.hset(self.key, key, text)
                pipe.expire(self.key, self.retention)
                await pipe.execute()

    async def get(self, key: str) -> str | None:
        with redis_errors("offload", key=key):
            value = await self.client.hget(self.key, key)
        return None if value is None else str(value)
