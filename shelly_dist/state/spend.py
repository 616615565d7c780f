"""Spend limits in Redis, shared by every process of a deployment (``models/governor/spend.py``).

One string per scope and period (``{prefix}spend:{spend}:<scope>:<period>``, the USD spent),
every one under the ``{spend}`` hash tag so a call's reservation checks and adds to all of its
scopes' days and months in one script, atomically, on a Redis Cluster too (the tag makes spend
one slot: one small script per model call, far from what a node can take). Each total expires
after its period is over (two days, thirty-two days).
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from shelly_dist.models.governor.spend import Refusal, SpendScope, periods
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import Keys

RESERVE = """
local amount = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  local bound = tonumber(ARGV[2 * i])
  local spent = tonumber(redis.call('GET', key) or '0')
  if bound > 0 and spent + amount > bound + 1e-12 then return {i, tostring(spent)} end
end
for i, key in ipairs(KEYS) do
  redis.call('INCRBYFLOAT', key, ARGV[1])
  redis.call('EXPIRE', key, ARGV[2 * i + 1])
end
return {}
"""
"""Add the amount to every scope-period total, or refuse (its 1-based index and what it had spent)
when one would pass its bound."""

SETTLE = """
for i, key in ipairs(KEYS) do
  redis.call('INCRBYFLOAT', key, ARGV[1])
  redis.call('EXPIRE', key, ARGV[i + 1])
end
return 1
"""
"""Add the difference between a call's cost and its reservation to every scope-period total."""


class RedisSpendLedger:
    """:class:`~shelly_dist.models.governor.spend.SpendLedger` over a ``redis.asyncio`` client."""

    def __init__(self, client: aioredis.Redis, *, prefix: str = "shelly:") -> None:
        self._keys = Keys(prefix)
        self._reserve = client.register_script(RESERVE)
        self._settle = client.register_script(SETTLE)

    def _plan(self, scopes: list[SpendScope], now: float) -> list[tuple[str, SpendScope, str, int]]:
        return [(self._keys.spend(scope.name, period), scope, name, keep)
                for scope in scopes for name, period, keep in periods(now)]

    async def reserve(self, scopes: list[SpendScope], amount: float, now: float) -> Refusal | None:
        plan = self._plan(scopes, now)
        args: list[Any] = [repr(amount)]
        for _, scope, name, keep in plan:
            args += [getattr(scope.limit, name), keep]
        with redis_errors("spend"):
            out = await self._reserve(keys=[k for k, *_ in plan], args=args)
        if not out:
            return None
        _, scope, name, _ = plan[int(out[0]) - 1]
        return Refusal(scope, name, float(out[1]))

    async def settle(self, scopes: list[SpendScope], reserved: float, actual: float, now: float) -> None:
        plan = self._plan(scopes, now)
        with redis_errors("spend"):
            await self._settle(keys=[k for k, *_ in plan], args=[repr(actual - reserved), *(keep for *_, keep in plan)])
