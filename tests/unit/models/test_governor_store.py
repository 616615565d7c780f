"""The provider governor's account, in memory and in Redis (fakeredis and the real server): one
algorithm, so every behaviour here holds for both stores — the sliding window, the batch pace,
the pause, learned limits, calls in flight, interactive first, fair shares."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from shelly_dist.models.governor import BATCH, INTERACTIVE, Ask, GovernorStore, KeyLimits, Learned, Settle
from shelly_dist.models.governor.base import BOUND, GRACE, WINDOW
from shelly_dist.models.governor.memory import TOLERANCE, MemoryGovernorStore
from shelly_dist.state.governor import RedisGovernorStore
from tests.unit.state.backends import redis_backend

STORES = ["memory", "fakeredis", "redis"]
T0 = 1_800_000_000.0
"""A fixed wall-clock start: the Redis store is driven by the test's clock (``server_time=False``)."""


@asynccontextmanager
async def store_of(request: pytest.FixtureRequest, kind: str) -> AsyncIterator[GovernorStore]:
    if kind == "memory":
        yield MemoryGovernorStore()
        return
    async with redis_backend(request, kind) as (client, keys):
        yield RedisGovernorStore(client, prefix=keys.prefix, server_time=False)


def ask(rid: str, tokens: int = 10, *, priority: str = INTERACTIVE, share: str = "", **limits: int) -> Ask:
    return Ask(unit="openai-k:gpt", id=rid, tokens=tokens, priority=priority, share=share, limits=KeyLimits(**limits))


@pytest.fixture(params=STORES)
async def store(request: pytest.FixtureRequest) -> AsyncIterator[GovernorStore]:
    async with store_of(request, request.param) as s:
        yield s


async def test_rpm_makes_the_extra_request_wait_for_the_oldest_to_leave_the_window(store: GovernorStore) -> None:
    assert (await store.reserve(ask("a", rpm=2), T0)).granted
    assert (await store.reserve(ask("b", rpm=2), T0 + 10)).granted
    third = await store.reserve(ask("c", rpm=2), T0 + 10)
    assert not third.granted and third.reason == "rpm"
    assert third.wait == pytest.approx(WINDOW - 10)
    assert (await store.reserve(ask("c", rpm=2), T0 + WINDOW + 0.01)).granted


async def test_input_tokens_per_minute_wait_for_enough_tokens_to_leave(store: GovernorStore) -> None:
    assert (await store.reserve(ask("a", 80, input_tpm=100), T0)).granted
    second = await store.reserve(ask("b", 30, input_tpm=100), T0 + 5)
    assert not second.granted and second.reason == "input_tpm" and second.wait == pytest.approx(WINDOW - 5)


async def test_a_request_larger_than_the_budget_goes_through_on_an_empty_window(store: GovernorStore) -> None:
    assert (await store.reserve(ask("a", 500, input_tpm=10), T0)).granted


async def test_settling_replaces_the_estimate_by_the_real_usage(store: GovernorStore) -> None:
    assert (await store.reserve(ask("a", 90, input_tpm=100), T0)).granted
    await store.settle(Settle(unit="openai-k:gpt", id="a", estimated=90, input_tokens=10, output_tokens=5), T0 + 1)
    assert (await store.reserve(ask("b", 50, input_tpm=100), T0 + 1)).granted


async def test_output_tokens_count_once_settled(store: GovernorStore) -> None:
    assert (await store.reserve(ask("a", output_tpm=50), T0)).granted
    await store.settle(Settle(unit="openai-k:gpt", id="a", estimated=10, input_tokens=10, output_tokens=50), T0)
    second = await store.reserve(ask("b", output_tpm=50), T0 + 1)
    assert not second.granted and second.reason == "output_tpm"


async def test_calls_within_every_limit_do_not_wait(store: GovernorStore) -> None:
    for i in range(10):
        assert (await store.reserve(ask(f"r{i}", rpm=10, input_tpm=1000, output_tpm=1000), T0)).granted


async def test_a_pause_stops_every_call_until_it_ends_and_never_shortens(store: GovernorStore) -> None:
    await store.learn("openai-k:gpt", Learned(pause_until=T0 + 15), T0)
    await store.learn("openai-k:gpt", Learned(pause_until=T0 + 5), T0)
    held = await store.reserve(ask("a"), T0 + 1)
    assert not held.granted and held.reason == "paused" and held.wait == pytest.approx(14)
    assert (await store.reserve(ask("a"), T0 + 15.01)).granted


async def test_limits_learned_from_the_vendor_hold_when_the_config_sets_none(store: GovernorStore) -> None:
    await store.learn("openai-k:gpt", Learned(limits=KeyLimits(rpm=1, input_tpm=1000)), T0)
    assert await store.limits("openai-k:gpt") == KeyLimits(rpm=1, input_tpm=1000)
    assert (await store.reserve(ask("a"), T0)).granted
    learned = await store.reserve(ask("b"), T0)
    assert not learned.granted and learned.reason == "rpm"
    assert (await store.reserve(ask("c", rpm=5), T0)).granted  # the config's own limit wins


async def test_calls_in_flight_are_capped_until_one_settles(store: GovernorStore) -> None:
    assert (await store.reserve(ask("a", max_concurrent=1), T0)).granted
    second = await store.reserve(ask("b", max_concurrent=1), T0)
    assert not second.granted and second.reason == "max_concurrent"
    await store.settle(Settle(unit="openai-k:gpt", id="a", estimated=10, input_tokens=10, latency=2.0), T0 + 2)
    assert (await store.reserve(ask("b", max_concurrent=1), T0 + 2)).granted


async def test_batch_work_is_paced_and_interactive_work_is_not(store: GovernorStore) -> None:
    assert (await store.reserve(ask("b1", priority=BATCH, rpm=40), T0)).granted
    paced = await store.reserve(ask("b2", priority=BATCH, rpm=40), T0)
    assert not paced.granted and paced.reason == "rpm" and paced.wait == pytest.approx(WINDOW / 40 - TOLERANCE)
    assert (await store.reserve(ask("i1", rpm=40), T0)).granted


async def test_a_waiting_interactive_call_goes_before_an_earlier_batch_waiter(store: GovernorStore) -> None:
    assert (await store.reserve(ask("first", rpm=1), T0)).granted
    batch = await store.reserve(ask("batch", priority=BATCH, rpm=1), T0 + WINDOW - 1.5)
    person = await store.reserve(ask("person", rpm=1), T0 + WINDOW - 1)
    assert not batch.granted and not person.granted and person.wait <= BOUND  # both wait in their process
    turn = T0 + WINDOW + 0.01
    held = await store.reserve(ask("batch", priority=BATCH, rpm=1), turn)  # the batch one comes back first
    assert not held.granted and held.reason == "queue"
    assert (await store.reserve(ask("person", rpm=1), turn)).granted


async def test_a_newcomer_waits_behind_an_earlier_waiter_waiting_in_its_process(store: GovernorStore) -> None:
    assert (await store.reserve(ask("first", rpm=1), T0)).granted
    early = await store.reserve(ask("early", rpm=1), T0 + WINDOW - 1)
    assert not early.granted and early.wait <= BOUND
    turn = T0 + WINDOW + 0.01
    late = await store.reserve(ask("late", rpm=1), turn)
    assert not late.granted and late.reason == "queue"
    assert (await store.reserve(ask("early", rpm=1), turn)).granted


async def test_a_suspended_waiter_does_not_hold_back_a_caller_who_finds_room(store: GovernorStore) -> None:
    assert (await store.reserve(ask("first", rpm=1), T0)).granted
    away = await store.reserve(ask("away", rpm=1), T0 + 1)  # its turn a minute away: its run suspends
    assert not away.granted and away.wait > BOUND
    assert (await store.reserve(ask("other", rpm=1), T0 + WINDOW + 0.01)).granted


async def test_waiters_of_a_small_batch_are_not_queued_behind_a_large_one(store: GovernorStore) -> None:
    assert (await store.reserve(ask("first", priority=BATCH, share="big", rpm=60), T0)).granted
    big = [await store.reserve(ask(f"big{i}", priority=BATCH, share="big", rpm=60), T0) for i in range(5)]
    small = await store.reserve(ask("small0", priority=BATCH, share="small", rpm=60), T0)
    turns = [d.wait for d in big]
    assert turns == sorted(turns) and not small.granted
    assert small.wait < turns[2]  # ranked with the big batch's first waiters, not after its fifth


async def test_the_same_reservation_keeps_its_place_in_the_queue(store: GovernorStore) -> None:
    assert (await store.reserve(ask("first", priority=BATCH, share="x", rpm=60), T0)).granted
    a = await store.reserve(ask("a", priority=BATCH, share="x", rpm=60), T0)
    b = await store.reserve(ask("b", priority=BATCH, share="x", rpm=60), T0)
    again = await store.reserve(ask("a", priority=BATCH, share="x", rpm=60), T0 + 0.5)
    assert a.wait < b.wait and again.wait == pytest.approx(a.wait - 0.5)


async def test_a_waiter_dropped_after_the_grace_time_is_queued_anew(store: GovernorStore) -> None:
    assert (await store.reserve(ask("first", priority=BATCH, rpm=60), T0)).granted
    await store.reserve(ask("a", priority=BATCH, rpm=60), T0)
    later = T0 + WINDOW + GRACE + 5  # everything expired: a fresh window
    assert (await store.reserve(ask("b", priority=BATCH, rpm=60), later)).granted


async def test_batch_pacing_follows_the_slower_of_requests_and_tokens_and_counts_each_once(
    store: GovernorStore,
) -> None:
    lim = {"rpm": 600, "input_tpm": 240_000}  # a request each 0.1017 s; 400 tokens each 0.1017 s too
    assert (await store.reserve(ask("b1", 10, priority=BATCH, **lim), T0)).granted
    await store.settle(Settle(unit="openai-k:gpt", id="b1", estimated=10, input_tokens=400, priority=BATCH,
                              limits=KeyLimits(**lim)), T0 + 0.05)
    step = WINDOW / 600
    assert (await store.reserve(ask("b2", 10, priority=BATCH, **lim), T0 + step - TOLERANCE + 0.001)).granted
    await store.settle(Settle(unit="openai-k:gpt", id="b2", estimated=10, input_tokens=800, priority=BATCH,
                              limits=KeyLimits(**lim)), T0 + step)
    tokens = await store.reserve(ask("b3", 10, priority=BATCH, **lim), T0 + 2 * step - TOLERANCE + 0.001)
    assert not tokens.granted and tokens.reason == "input_tpm"  # 800 tokens: two requests' worth of pace


async def test_reservations_learn_how_the_vendor_counts_tokens_against_the_estimate(store: GovernorStore) -> None:
    for i in range(12):  # the vendor counts ten tokens for each one the estimate sees
        assert (await store.reserve(ask(f"r{i}", 10), T0 + i)).granted
        await store.settle(Settle(unit="openai-k:gpt", id=f"r{i}", estimated=10, input_tokens=100), T0 + i)
    # 1,200 counted so far; a 10-token estimate now reserves about 100: 1,300 > 1,250
    held = await store.reserve(ask("next", 10, input_tpm=1250), T0 + 12)
    assert not held.granted and held.reason == "input_tpm"
