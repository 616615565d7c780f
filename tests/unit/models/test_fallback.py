"""Fallback chains: when to move on, cooldown skipping, reset, events, cancellation."""

from __future__ import annotations

import asyncio

import pytest

from shelly_dist.chats import Chat
from shelly_dist.errors import ContextTooLong, ModelHTTPError, UsageError
from shelly_dist.events import PROVIDER_FALLBACK, Event
from shelly_dist.models import FallbackCompleter, MemoryCooldownStore, with_fallback
from tests.unit.models.fakes import FakeClock, FlakyCompleter, http_error


def chain(
    *members: tuple[str, FlakyCompleter],
    clock: FakeClock,
    events: list[Event] | None = None,
    store: MemoryCooldownStore | None = None,
) -> FallbackCompleter:
    return with_fallback(
        members[0],
        list(members[1:]),
        cooldowns=store or MemoryCooldownStore(),
        clock=clock,
        on_event=events.append if events is not None else lambda e: None,
    )


@pytest.mark.parametrize("kind", ["rate_limit", "overloaded", "server", "timeout", "network", "billing"])
async def test_transient_and_billing_errors_fall_back_to_the_next_candidate(kind: str) -> None:
    a, b = FlakyCompleter(http_error(kind)), FlakyCompleter(text="b")
    reply = await chain(("a", a), ("b", b), clock=FakeClock()).complete(Chat(), [])
    assert reply.text_content() == "b"


@pytest.mark.parametrize("error", [http_error("auth"), http_error("bad_request"), ContextTooLong("too long")])
async def test_auth_bad_request_and_context_overflow_do_not_fall_back(error: Exception) -> None:
    a, b = FlakyCompleter(error), FlakyCompleter(text="b")
    with pytest.raises(type(error)):
        await chain(("a", a), ("b", b), clock=FakeClock()).complete(Chat(), [])
    assert b.calls == 0


async def test_cancellation_never_falls_back() -> None:
    a, b = FlakyCompleter(asyncio.CancelledError()), FlakyCompleter(text="b")
    with pytest.raises(asyncio.CancelledError):
        await chain(("a", a), ("b", b), clock=FakeClock()).complete(Chat(), [])
    assert b.calls == 0


async def test_a_candidate_in_cooldown_is_skipped_until_it_ends() -> None:
    clock = FakeClock()
    a, b = FlakyCompleter(http_error("overloaded"), text="a"), FlakyCompleter(text="b")
    c = chain(("a", a), ("b", b), clock=clock)
    await c.complete(Chat(), [])
    assert (await c.complete(Chat(), [])).text_content() == "b"
    assert a.calls == 1
    clock.now += 61
    assert (await c.complete(Chat(), [])).text_content() == "a"


async def test_success_resets_the_cooldown_ladder() -> None:
    clock, store = FakeClock(), MemoryCooldownStore()
    a = FlakyCompleter(http_error("server"), text="a")
    c = chain(("a", a), ("b", FlakyCompleter()), clock=clock, store=store)
    await c.complete(Chat(), [])
    clock.now += 61
    await c.complete(Chat(), [])
    assert await store.cooling_until("a") == 0.0


async def test_when_every_candidate_cools_down_the_soonest_is_tried() -> None:
    clock, store = FakeClock(), MemoryCooldownStore()
    await store.record_failure("a", billing=True, now=clock.now)
    await store.record_failure("b", billing=False, now=clock.now)
    a, b = FlakyCompleter(text="a"), FlakyCompleter(text="b")
    assert (await chain(("a", a), ("b", b), clock=clock, store=store).complete(Chat(), [])).text_content() == "b"


async def test_the_last_candidates_error_is_raised_when_all_fail() -> None:
    last = http_error("overloaded")
    c = chain(("a", FlakyCompleter(http_error("server"))), ("b", FlakyCompleter(last)), clock=FakeClock())
    with pytest.raises(ModelHTTPError) as info:
        await c.complete(Chat(), [])
    assert info.value is last


async def test_falling_back_emits_provider_fallback_with_from_to_and_kind() -> None:
    events: list[Event] = []
    c = chain(
        ("a", FlakyCompleter(http_error("rate_limit"))), ("b", FlakyCompleter()), clock=FakeClock(), events=events
    )
    await c.complete(Chat(), [])
    [event] = events
    assert event.kind == PROVIDER_FALLBACK
    assert (event.data["from"], event.data["to"], event.data["error_kind"]) == ("a", "b", "rate_limit")


async def test_the_chain_adds_up_usage_across_candidates() -> None:
    c = chain(("a", FlakyCompleter(http_error("server"))), ("b", FlakyCompleter()), clock=FakeClock())
    await c.complete(Chat(), [])
    await c.complete(Chat(), [])
    assert c.usage.count() == 2


def test_an_empty_chain_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="fallback: at least one candidate"):
        FallbackCompleter([], cooldowns=MemoryCooldownStore())


class _Suspends:
    """A key whose governor would make the call wait ``wait`` seconds."""

    def __init__(self, wait: float) -> None:
        self.wait = wait
        self.calls = 0

    async def complete(self, chat: Chat, tools: list[object]) -> object:
        from shelly_dist.models.suspend import SuspendModel

        self.calls += 1
        raise SuspendModel("governor", {}, 1000.0 + self.wait)


def rotation(*members: object) -> FallbackCompleter:
    from shelly_dist.models import Candidate

    return FallbackCompleter([Candidate(f"p[key {i}]", m) for i, m in enumerate(members)],  # type: ignore[arg-type]
                             cooldowns=MemoryCooldownStore(), clock=FakeClock(), rotate=True, provider="p")


async def test_a_key_whose_governor_would_suspend_the_call_is_passed_over_for_the_next() -> None:
    waiting, free = _Suspends(30), FlakyCompleter(text="key 2")
    reply = await rotation(waiting, free).complete(Chat(), [])
    assert reply.text_content() == "key 2" and waiting.calls == 1


async def test_when_every_key_would_suspend_the_call_the_soonest_turn_is_taken() -> None:
    from shelly_dist.models.suspend import SuspendModel

    with pytest.raises(SuspendModel) as info:
        await rotation(_Suspends(30), _Suspends(5)).complete(Chat(), [])
    assert info.value.due_at == 1005.0


async def test_a_429_the_governor_paused_the_key_for_does_not_climb_its_cooldown() -> None:
    store, clock = MemoryCooldownStore(), FakeClock()
    paused = http_error("rate_limit", retry_after=15.0)
    paused.paused = True
    reply = await chain(("a", FlakyCompleter(paused)), ("b", FlakyCompleter(text="b")), clock=clock,
                        store=store).complete(Chat(), [])
    assert reply.text_content() == "b" and await store.cooling_until("a") == 0
