"""The in-memory cooldown store: ladders, reset, and never shortening."""

from __future__ import annotations

from shelly_dist.models import MemoryCooldownStore
from shelly_dist.models.cooldown import key_id

MIN = 60.0
HOUR = 3600.0


async def test_transient_failures_climb_1_5_25_60_minutes() -> None:
    store, now = MemoryCooldownStore(), 1000.0
    got = [
        await store.record_failure("p", billing=False, now=now + i * 10 * HOUR) - (now + i * 10 * HOUR)
        for i in range(5)
    ]
    assert got == [1 * MIN, 5 * MIN, 25 * MIN, 60 * MIN, 60 * MIN]


async def test_billing_failures_climb_5_then_24_hours() -> None:
    store = MemoryCooldownStore()
    first = await store.record_failure("p", billing=True, now=0.0)
    second = await store.record_failure("p", billing=True, now=100 * HOUR)
    assert (first, second - 100 * HOUR) == (5 * HOUR, 24 * HOUR)


async def test_a_transient_failure_never_shortens_a_billing_cooldown() -> None:
    store = MemoryCooldownStore()
    await store.record_failure("p", billing=True, now=0.0)
    assert await store.record_failure("p", billing=False, now=1.0) == 5 * HOUR


async def test_reset_forgets_the_cooldown_and_the_ladder() -> None:
    store = MemoryCooldownStore()
    await store.record_failure("p", billing=False, now=0.0)
    await store.reset("p")
    assert await store.cooling_until("p") == 0.0
    assert await store.record_failure("p", billing=False, now=0.0) == 1 * MIN


def test_key_ids_hide_the_api_key() -> None:
    kid = key_id("anthropic", "sk-secret")
    assert kid.startswith("anthropic#key-") and "secret" not in kid
    assert kid != key_id("anthropic", "sk-other")
