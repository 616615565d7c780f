"""The budget ledger contract, in memory, on fakeredis (Lua) and on the real Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from shelly_dist.agent.limits import BudgetLedger, BudgetScope, Charge, Limits, MemoryLedger
from tests.unit.state.backends import BACKENDS, redis_backend


@pytest.fixture(params=BACKENDS)
async def ledger(request: pytest.FixtureRequest) -> AsyncIterator[BudgetLedger]:
    if request.param == "memory":
        yield MemoryLedger()
        return
    from shelly_dist.state.limits import RedisLedger

    async with redis_backend(request, request.param) as (client, keys):
        yield RedisLedger(client, keys, retention=600)


def scope(id: str = "root", **limits: float) -> BudgetScope:
    return BudgetScope(id=id, limits=Limits(**limits))


async def test_fifty_concurrent_reservations_against_a_limit_of_ten_grant_exactly_ten(ledger: BudgetLedger) -> None:
    tree = [scope(model_requests=10)]
    outcomes = await asyncio.gather(*(ledger.reserve(tree, Charge(model_requests=1)) for _ in range(50)))
    assert sum(1 for o in outcomes if o is None) == 10
    used, reserved = await ledger.spent("root")
    assert reserved.model_requests == 10 and used.model_requests == 0


async def test_a_refusal_names_the_scope_and_the_limit(ledger: BudgetLedger) -> None:
    tree = [scope("outer", model_requests=5), scope("inner", total_tokens=100)]
    refusal = await ledger.reserve(tree, Charge(model_requests=1, total_tokens=101))
    assert refusal is not None
    assert (refusal.scope, refusal.limit, refusal.value) == ("inner", "total_tokens", 100)
    assert refusal.message() == "limits: tree of run inner reached total_tokens 100"


async def test_a_refused_reservation_adds_to_no_scope(ledger: BudgetLedger) -> None:
    tree = [scope("outer", model_requests=5), scope("inner", model_requests=1)]
    assert await ledger.reserve(tree, Charge(model_requests=1)) is None
    assert await ledger.reserve(tree, Charge(model_requests=1)) is not None
    _, outer = await ledger.spent("outer")
    assert outer.model_requests == 1


async def test_settle_replaces_the_reservation_with_the_actual_usage(ledger: BudgetLedger) -> None:
    tree = [scope(total_tokens=1000, cost_usd=1.0)]
    charge = Charge(1, 800, 0.5)
    assert await ledger.reserve(tree, charge) is None
    assert await ledger.reserve(tree, charge) is not None  # 800 + 800 would pass 1000
    await ledger.settle(tree, charge, Charge(1, 150, 0.1))
    used, reserved = await ledger.spent("root")
    assert (used.model_requests, used.total_tokens) == (1, 150) and used.cost_usd == pytest.approx(0.1)
    assert (reserved.model_requests, reserved.total_tokens) == (0, 0) and reserved.cost_usd == pytest.approx(0)
    assert await ledger.reserve(tree, charge) is None  # 150 + 800 fits


async def test_cost_limit_refuses_what_would_pass_it(ledger: BudgetLedger) -> None:
    tree = [scope(cost_usd=0.3)]
    assert await ledger.reserve(tree, Charge(cost_usd=0.1)) is None
    assert await ledger.reserve(tree, Charge(cost_usd=0.2)) is None  # 0.1 + 0.2 is not past 0.3
    refusal = await ledger.reserve(tree, Charge(cost_usd=0.01))
    assert refusal is not None and refusal.message() == "limits: tree of run root reached cost_usd 0.3"


async def test_a_zero_limit_is_no_limit(ledger: BudgetLedger) -> None:
    tree = [scope(model_requests=0, total_tokens=10)]
    for _ in range(20):
        assert await ledger.reserve(tree, Charge(model_requests=1)) is None
