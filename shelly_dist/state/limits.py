"""The tree-limits ledger in Redis, shared by the coordinator and every worker.

One hash per scope (``{prefix}budget:{outer}:{scope}``, tagged by the outermost scope of the
calls that touch it: one slot per call on a Redis Cluster, see ``Keys.budget``) with the used and
reserved totals of each dimension. Each operation is one Lua script over every scope of the call,
passed in KEYS, so a
reservation checks all of its scopes and adds to all of them or to none in one atomic step: two
children on two workers can never both take the last request of a tree. Every write refreshes the
hash's retention TTL.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis.asyncio as aioredis

from shelly_dist.agent.limits import BudgetScope, Charge, Refusal
from shelly_dist.agent.limits.base import LIMIT_NAMES
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import DEFAULT_RETENTION, Keys

_NAMES = "local names = {'model_requests', 'total_tokens', 'cost_usd'}\n"

RESERVE = _NAMES + """
local retention = tonumber(ARGV[1])
local charge = {tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])}
for i, key in ipairs(KEYS) do
  for d = 1, 3 do
    local limit = tonumber(ARGV[4 + (i - 1) * 3 + d])
    if limit > 0 then
      local used = tonumber(redis.call('HGET', key, 'used:' .. names[d]) or '0')
      local held = tonumber(redis.call('HGET', key, 'reserved:' .. names[d]) or '0')
      if used + held + charge[d] > limit + 1e-9 then return {i, names[d]} end
    end
  end
end
for i, key in ipairs(KEYS) do
  for d = 1, 3 do
    if charge[d] ~= 0 then redis.call('HINCRBYFLOAT', key, 'reserved:' .. names[d], ARGV[1 + d]) end
  end
  redis.call('EXPIRE', key, retention)
end
return {}
"""
"""Refuses (returning the 1-based scope index and the limit's name) when used + reserved + the
charge would pass any limit of any scope; otherwise reserves the charge on every scope."""

SETTLE = _NAMES + """
local retention = tonumber(ARGV[1])
for _, key in ipairs(KEYS) do
  for d = 1, 3 do
    local reserved, actual = tonumber(ARGV[1 + d]), tonumber(ARGV[4 + d])
    if reserved ~= 0 then redis.call('HINCRBYFLOAT', key, 'reserved:' .. names[d], -reserved) end
    if actual ~= 0 then redis.call('HINCRBYFLOAT', key, 'used:' .. names[d], actual) end
  end
  redis.call('EXPIRE', key, retention)
end
return 1
"""
"""Moves one call from reserved to used on every scope: takes the reservation back, adds the actual."""


def _args(charge: Charge) -> list[str]:
    return [repr(float(v)) for v in charge.values()]


class RedisLedger:
    """:class:`~shelly_dist.agent.limits.BudgetLedger` over a ``redis.asyncio.Redis`` client."""

    def __init__(self, client: aioredis.Redis, keys: Keys, *, retention: int = DEFAULT_RETENTION) -> None:
        self.client = client
        self.keys = keys
        self.retention = retention
        self._reserve = client.register_script(RESERVE)
        self._settle = client.register_script(SETTLE)

    async def reserve(self, scopes: Sequence[BudgetScope], charge: Charge) -> Refusal | None:
        if not scopes:
            return None
        args = [self.retention, *_args(charge)]
        for scope in scopes:
            args += [repr(float(v)) for v in scope.limits.values()]
        with redis_errors("limits"):
            out = await self._reserve(keys=self._keys(scopes), args=args)
        if not out:
            return None
        scope = scopes[int(out[0]) - 1]
        name = str(out[1])
        return Refusal(scope.id, name, getattr(scope.limits, name))

    async def settle(self, scopes: Sequence[BudgetScope], reserved: Charge, actual: Charge) -> None:
        if not scopes:
            return
        with redis_errors("limits"):
            await self._settle(keys=self._keys(scopes),
                               args=[self.retention, *_args(reserved), *_args(actual)])

    def _keys(self, scopes: Sequence[BudgetScope]) -> list[str]:
        return [self.keys.budget(s.id, scopes[0].id) for s in scopes]

    async def spent(self, scope: str, outer: str | None = None) -> tuple[Charge, Charge]:
        """Used and reserved totals of ``scope`` (``outer``: the outermost scope above it, when
        it is nested)."""
        with redis_errors("limits"):
            raw = await self.client.hgetall(self.keys.budget(scope, outer))

        def charge(kind: str) -> Charge:
            values = [float(raw.get(f"{kind}:{n}", 0) or 0) for n in LIMIT_NAMES]
            return Charge(round(values[0]), round(values[1]), values[2])

        return charge("used"), charge("reserved")
