"""Provider cooldowns in Redis, shared by every worker of a deployment.

One hash per key (``{prefix}cooldown:{key}``) with the consecutive-failure counts per class and
the end of the cooldown. A failure is recorded by one Lua script — increment the count, compute
the step of the ladder, keep the later of the old and new end, set the expiry — so two workers
failing at once climb the ladder twice and never lose an update. The hash expires a day after its
cooldown ends, so an idle provider's counts fade instead of piling up.
"""

from __future__ import annotations

import json

from redis.asyncio import Redis
from redis.exceptions import RedisError

from shelly_dist.errors import StoreError
from shelly_dist.models.cooldown import steps_for

RETENTION = 24 * 3600
"""Seconds a cooldown record outlives its cooldown (the counts then start again from zero)."""

_RECORD_FAILURE = """
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
local now = tonumber(ARGV[2])
local steps = cjson.decode(ARGV[3])
local untilv = now + steps[math.min(n, #steps)]
local cur = tonumber(redis.call('HGET', KEYS[1], 'until') or '0')
if cur > untilv then untilv = cur end
redis.call('HSET', KEYS[1], 'until', string.format('%.3f', untilv))
redis.call('EXPIRE', KEYS[1], math.ceil(untilv - now) + tonumber(ARGV[4]))
return string.format('%.3f', untilv)
"""


class RedisCooldownStore:
    """:class:`~shelly_dist.models.cooldown.CooldownStore` over a ``redis.asyncio.Redis`` client."""

    def __init__(self, client: Redis, *, prefix: str = "shelly:") -> None:
        self._client = client
        self._prefix = prefix
        self._record = client.register_script(_RECORD_FAILURE)

    def _key(self, key: str) -> str:
        return f"{self._prefix}cooldown:{key}"

    async def cooling_until(self, key: str) -> float:
        try:
            value = await self._client.hget(self._key(key), "until")
        except RedisError as exc:
            raise StoreError(f"cooldown: cannot read {key}: {exc}", key=key) from exc
        return float(value) if value is not None else 0.0

    async def record_failure(self, key: str, *, billing: bool, now: float) -> float:
        field = "billing" if billing else "transient"
        try:
            until = await self._record(
                keys=[self._key(key)],
                args=[field, repr(now), json.dumps(list(steps_for(billing))), RETENTION],
            )
        except RedisError as exc:
            raise StoreError(f"cooldown: cannot record a failure of {key}: {exc}", key=key) from exc
        return float(until)

    async def reset(self, key: str) -> None:
        try:
            await self._client.delete(self._key(key))
        except RedisError as exc:
            raise StoreError(f"cooldown: cannot reset {key}: {exc}", key=key) from exc
