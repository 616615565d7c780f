"""The workspace in Redis: shared by the coordinator, every worker and the CLI.

Layout (``Keys.workspace``): the channel is a list of message JSON whose position is the id; ack
cursors are one hash; every table is one hash. Appends, acks and the wake lease are Lua scripts
(``scripts.py``); table mutations are optimistic transactions (WATCH the hash, read, apply the
rule in Python, MULTI/EXEC), as the task board's are, so the rules have one copy. Every write
refreshes the key's retention TTL.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import WatchError

from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import DEFAULT_RETENTION, Keys
from shelly_dist.workspace.base import TextRule, WorkspaceBase
from shelly_dist.workspace.models import ChannelMessage
from shelly_dist.workspace.scripts import WorkspaceScripts

ORIGIN = "workspace"


class RedisWorkspace(WorkspaceBase):
    """The workspace of ``session`` in Redis; ``client`` comes from ``redisio.connection.connect``."""

    def __init__(
        self, client: aioredis.Redis, keys: Keys | None = None, *, session: str, retention: int = DEFAULT_RETENTION
    ) -> None:
        super().__init__()
        self._client = client
        self._keys = keys or Keys()
        self._session = session
        self._retention = int(retention)
        self._channel = self._keys.workspace(session, "channel")
        self._cursors = self._keys.workspace(session, "cursors")
        self._scripts = WorkspaceScripts.of(client)

    def _hash(self, table: str) -> str:
        return self._keys.workspace(self._session, table)

    async def _append(self, fields: dict[str, Any]) -> ChannelMessage:
        now = time.time()
        body = json.dumps(fields, separators=(",", ":"), ensure_ascii=False)[1:]
        with redis_errors(ORIGIN):
            mid = int(await self._scripts.append(keys=[self._channel], args=[body, repr(now), self._retention]))
        return ChannelMessage.model_validate({"id": mid, "timestamp": now, **fields})

    async def _after(self, after: int) -> list[ChannelMessage]:
        with redis_errors(ORIGIN):
            raw = await self._client.lrange(self._channel, max(after, 0), -1)
        return [ChannelMessage.model_validate_json(text) for text in raw]

    async def cursor(self, agent: str) -> int:
        with redis_errors(ORIGIN):
            return int(await self._client.hget(self._cursors, agent) or 0)

    async def _ack(self, agent: str, until: int) -> int:
        with redis_errors(ORIGIN):
            return int(await self._scripts.ack(keys=[self._cursors, self._channel],
                                               args=[agent, int(until), self._retention]))

    async def _get(self, table: str, field: str) -> str | None:
        with redis_errors(ORIGIN):
            return await self._client.hget(self._hash(table), field)

    async def _all(self, table: str) -> dict[str, str]:
        with redis_errors(ORIGIN):
            return dict(await self._client.hgetall(self._hash(table)))

    async def _put(self, table: str, field: str, text: str, *, only_new: bool = False) -> bool:
        key = self._hash(table)
        with redis_errors(ORIGIN):
            async with self._client.pipeline(transaction=True) as pipe:
                (pipe.hsetnx if only_new else pipe.hset)(key, field, text)
                pipe.expire(key, self._retention)
                stored, _ = await pipe.execute()
        return bool(stored) or not only_new

    async def _mutate(self, table: str, field: str, rule: TextRule) -> str:
        key = self._hash(table)
        with redis_errors(ORIGIN):
            async with self._client.pipeline(transaction=True) as pipe:
                while True:
                    try:
                        await pipe.watch(key)
                        text = rule(await pipe.hget(key, field))
                        pipe.multi()
                        pipe.hset(key, field, text)
                        pipe.expire(key, self._retention)
                        await pipe.execute()
                        return text
                    except WatchError:
                        continue

    async def _delete(self, table: str, field: str) -> bool:
        with redis_errors(ORIGIN):
            return bool(await self._client.hdel(self._hash(table), field))

    async def acquire_wake(self, agent: str, token: str, ttl: float) -> bool:
        with redis_errors(ORIGIN):
            return bool(await self._scripts.acquire(keys=[self._keys.workspace_wake(self._session, agent)],
                                                    args=[token, int(ttl * 1000)]))

    async def renew_wake(self, agent: str, token: str, ttl: float) -> bool:
        with redis_errors(ORIGIN):
            return bool(await self._scripts.renew(keys=[self._keys.workspace_wake(self._session, agent)],
                                                  args=[token, int(ttl * 1000)]))

    async def release_wake(self, agent: str, token: str) -> None:
        with redis_errors(ORIGIN):
            await self._scripts.release(keys=[self._keys.workspace_wake(self._session, agent)], args=[token])

    async def wake_lease_left(self, agent: str) -> float:
        with redis_errors(ORIGIN):
            left = await self._client.pttl(self._keys.workspace_wake(self._session, agent))
        return max(int(left), 0) / 1000


class RedisDueIndex:
    """The schedules' due index in Redis (``Keys.team_due``); every write refreshes its retention
    TTL, so the index of a prefix nobody schedules on any more goes away."""

    def __init__(self, client: aioredis.Redis, keys: Keys | None = None, *, retention: int = DEFAULT_RETENTION) -> None:
        self._client = client
        self._key = (keys or Keys()).team_due()
        self._retention = int(retention)
        self._scripts = WorkspaceScripts.of(client)

    async def schedule(self, entry: str, at: float) -> None:
        with redis_errors("schedules"):
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.zadd(self._key, {entry: int(at * 1000)})
                pipe.expire(self._key, self._retention)
                await pipe.execute()

    async def due(self, now: float, limit: int = 100) -> list[tuple[str, int]]:
        with redis_errors("schedules"):
            rows = await self._client.zrangebyscore(self._key, "-inf", int(now * 1000), start=0, num=limit,
                                                    withscores=True)
        return [(entry, int(score)) for entry, score in rows]

    async def claim(self, entry: str, score: int, next_at: float) -> bool:
        with redis_errors("schedules"):
            return bool(await self._scripts.claim_due(keys=[self._key],
                                                      args=[entry, score, int(next_at * 1000), self._retention]))

    async def remove(self, entry: str) -> None:
        with redis_errors("schedules"):
            await self._client.zrem(self._key, entry)

    async def hint(self, entry: str, at: float) -> None:
        with redis_errors("schedules"):
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.zadd(self._key, {entry: int(at * 1000)}, lt=True)
                pipe.expire(self._key, self._retention)
                await pipe.execute()

    async def drop(self, entry: str, score: int) -> bool:
        with redis_errors("schedules"):
            return bool(await self._scripts.drop_due(keys=[self._key], args=[entry, score]))
