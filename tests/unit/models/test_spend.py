"""Spend limits across a pool: USD per UTC day and month per key and per label, reserved at the
call's most possible cost before it is sent (all scopes or none), settled at its priced cost; a
call that would cross a limit is refused naming it. In memory and in Redis (fakeredis, real)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from shelly_dist.chats import Chat, Message, Role
from shelly_dist.errors import SpendLimitExceeded
from shelly_dist.models.governor.spend import MemorySpendLedger, SpendLedger, SpendLimit, SpendScope
from shelly_dist.models.pricing import PriceEntry
from shelly_dist.providers.factory import create_completer
from shelly_dist.state.spend import RedisSpendLedger
from shelly_dist.testing.model_server import ModelServer, Reply
from tests.unit.state.backends import redis_backend

DAY = 1_800_000_000.0  # 2027-01-15 08:00 UTC
KEY = SpendScope("key:k1", 'provider "p" key 1', SpendLimit(day_usd=1.0, month_usd=1.5))
LABEL = SpendScope("label:nightly", 'label "nightly"', SpendLimit(day_usd=0.5))


@pytest.fixture(params=["memory", "fakeredis", "redis"])
async def ledger(request: pytest.FixtureRequest) -> AsyncIterator[SpendLedger]:
    if request.param == "memory":
        yield MemorySpendLedger()
        return
    async with redis_backend(request, request.param) as (client, keys):
        yield RedisSpendLedger(client, prefix=keys.prefix)


async def test_a_reservation_past_the_days_limit_is_refused_naming_the_limit(ledger: SpendLedger) -> None:
    assert await ledger.reserve([KEY], 0.6, DAY) is None
    refusal = await ledger.reserve([KEY], 0.6, DAY)
    assert refusal is not None and refusal.limit == "day_usd" and refusal.spent == pytest.approx(0.6)
    assert refusal.message(0.6).startswith('spend limit: provider "p" key 1 reached its day_usd 1.00')


async def test_settling_replaces_the_reservation_by_the_cost(ledger: SpendLedger) -> None:
    assert await ledger.reserve([KEY], 0.9, DAY) is None
    await ledger.settle([KEY], 0.9, 0.1, DAY)
    assert await ledger.reserve([KEY], 0.8, DAY) is None


async def test_the_next_day_starts_again_but_the_month_remembers(ledger: SpendLedger) -> None:
    assert await ledger.reserve([KEY], 0.9, DAY) is None
    assert await ledger.reserve([KEY], 0.5, DAY + 86400) is None
    refusal = await ledger.reserve([KEY], 0.2, DAY + 2 * 86400)
    assert refusal is not None and refusal.limit == "month_usd"


async def test_a_refusal_of_one_scope_reserves_in_none(ledger: SpendLedger) -> None:
    assert await ledger.reserve([LABEL], 0.4, DAY) is None
    refusal = await ledger.reserve([KEY, LABEL], 0.2, DAY)
    assert refusal is not None and refusal.scope == LABEL
    assert await ledger.reserve([KEY], 1.0, DAY) is None  # the key got nothing from the refused call


async def test_a_providers_key_refuses_the_call_that_would_cross_its_spend_before_sending_it() -> None:
    price = PriceEntry(provider="openai", input=1_000_000.0, output=1_000_000.0)  # a dollar a token
    with ModelServer(format="openai", default=Reply(usage={"input": 3, "output": 2})) as server:
        completer = create_completer("openai", name="p", model="m", base_url=server.url, api_key="k",
                                     max_tokens=10, spend=SpendLimit(day_usd=40.0), price=price,
                                     spend_ledger=MemorySpendLedger())
        chat = Chat([Message.text("u", Role.USER, "hi")])
        # Each call reserves its most: 5 estimated input tokens and 10 out = $15; it costs $5 (3 + 2).
        for _ in range(6):  # spent 5n, reserving 15 more: within 40 while n <= 5
            await completer.complete(chat, [])
        with pytest.raises(SpendLimitExceeded, match=r'^provider "p": spend limit: provider "p" key 1 reached '
                                                     r"its day_usd 40\.00 \(spent 30\.0000") as info:
            await completer.complete(chat, [])
    assert info.value.limit == "day_usd" and info.value.kind == "billing"
    assert len(server.requests) == 6  # the refused call was never sent
