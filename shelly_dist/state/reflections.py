"""Reflection notes in Redis, for runs spread over workers: one sorted set per key prefix (that
is, per project config), scored by the time each note was written, so a note a child's parent
wrote on one worker is found by a delegation on any other. Only the newest ``KEPT`` notes are
kept, and the key carries the retention TTL, refreshed on every write."""

from __future__ import annotations

import time

import redis.asyncio as aioredis

from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import DEFAULT_RETENTION, Keys

KEPT = 200


class RedisReflectionStore:
    """The ``ReflectionStore`` (:mod:`shelly_dist.agent.reflections`) of one key prefix."""

    def __init__(self, client: aioredis.Redis, keys: Keys, *, retention: int = DEFAULT_RETENTION) -> None:
        self.client = client
        self.key = keys.reflections()
        self.retention = retention

    async def add(self, name: str, text: str) -> None:
        with redis_errors("reflections", key=name):
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.zadd(self.key, {text: time.time()})
                pipe.zremrangebyrank(self.key, 0, -KEPT - 1)
                pipe.expire(self.key, self.retention)
                await pipe.execute()

    async def newest(self, limit: int) -> list[str]:
        with redis_errors("reflections", key=self.key):
            return [str(v) for v in await self.client.zrevrange(self.key, 0, limit - 1)]
