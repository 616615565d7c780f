"""``max_concurrency`` across processes: the leased slots of :mod:`shelly_dist.agent.slots` in Redis.

One sorted set per (session, agent), ``…:s:{session}:slots:{agent}``, member = holder (a run id),
score = the holder's lease deadline in milliseconds of the Redis server's clock (``TIME``), so
workers on hosts with skewed clocks agree. Every change is one Lua script: an acquire evicts the
expired holders first (a worker killed with ``kill -9`` stops renewing, and its slot frees itself
once its deadline passes), then counts. Every key a script touches comes in ``KEYS`` and gets a
TTL on every write (DESIGN §3 rules 10 and 14); the TTL outlives the longest lease, so a set left
by dead holders disappears on its own.

A worker never waits for a slot inside a task (DESIGN §3 rule 1): it tries once, and a child
that finds its agent full is re-queued with a delay (see
:mod:`shelly_dist.runtime.celery.children.policy`).
"""

from __future__ import annotations

import math

import redis.asyncio as aioredis

from shelly_dist.agent.slots import Acquired
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import Keys

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

ACQUIRE = _NOW + """
local slots, holder, limit, lease, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
local got = 0
if redis.call('ZSCORE', slots, holder) then
  got = 2
elseif redis.call('ZCARD', slots) < limit then
  got = 1
end
if got > 0 then
  redis.call('ZADD', slots, now + lease, holder)
  redis.call('EXPIRE', slots, ttl)
end
return got
"""

RENEW = _NOW + """
local slots, holder, lease, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local deadline = redis.call('ZSCORE', slots, holder)
if not deadline or tonumber(deadline) <= now then return 0 end
redis.call('ZADD', slots, 'XX', now + lease, holder)
redis.call('EXPIRE', slots, ttl)
return 1
"""

RELEASE = """
local slots, holder = KEYS[1], ARGV[1]
redis.call('ZREM', slots, holder)
return 1
"""


class RedisSlots:
    """:class:`~shelly_dist.agent.slots.Slots` in Redis, shared by every worker of a pool."""

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self._keys = keys
        self._acquire = client.register_script(ACQUIRE)
        self._renew = client.register_script(RENEW)
        self._release = client.register_script(RELEASE)

    def key(self, session: str, agent: str) -> str:
        return self._keys.agent_slots(session, agent)

    @staticmethod
    def _ttl(lease: float) -> int:
        return max(60, math.ceil(lease * 4))

    async def try_acquire(self, session: str, agent: str, holder: str, limit: int, lease: float) -> Acquired:
        with redis_errors("max_concurrency"):
            got = await self._acquire(keys=[self.key(session, agent)],
                                      args=[holder, limit, int(lease * 1000), self._ttl(lease)])
        return Acquired(int(got))

    async def renew(self, session: str, agent: str, holder: str, lease: float) -> bool:
        with redis_errors("max_concurrency"):
            got = await self._renew(keys=[self.key(session, agent)], args=[holder, int(lease * 1000), self._ttl(lease)])
        return bool(int(got))

    async def release(self, session: str, agent: str, holder: str) -> None:
        with redis_errors("max_concurrency"):
            await self._release(keys=[self.key(session, agent)], args=[holder])
