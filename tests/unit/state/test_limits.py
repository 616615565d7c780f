"""The Redis ledger's keys: one per scope, passed to the scripts, each with the retention TTL."""

from __future__ import annotations

import pytest

from shelly_dist.agent.limits import BudgetScope, Charge, Limits
from shelly_dist.state.limits import RedisLedger
from tests.unit.state.backends import REDIS_BACKENDS, redis_backend


@pytest.mark.parametrize("kind", REDIS_BACKENDS)
async def test_every_scope_key_carries_the_retention_ttl(request: pytest.FixtureRequest, kind: str) -> None:
    async with redis_backend(request, kind) as (client, keys):
        ledger = RedisLedger(client, keys, retention=600)
        tree = [BudgetScope(id="a", limits=Limits(model_requests=3)), BudgetScope(id="b", limits=Limits())]
        await ledger.reserve(tree, Charge(model_requests=1))
        await ledger.settle(tree, Charge(model_requests=1), Charge(model_requests=1, total_tokens=5))
        for sid in ("a", "b"):
            assert 0 < await client.ttl(keys.budget(sid, "a")) <= 600
