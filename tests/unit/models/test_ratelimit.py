"""Proactive throttling over a one-minute sliding window, with an injected clock."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from shelly_dist.chats import Chat, Message, Role
from shelly_dist.models import RateLimiter, RateLimitSettings, ThrottledCompleter, Usage
from shelly_dist.models.ratelimit import estimate_tokens
from tests.unit.models.fakes import FakeClock, FlakyCompleter


def limiter(clock: FakeClock, **settings: int) -> RateLimiter:
    return RateLimiter(RateLimitSettings(**settings), clock=clock, sleep=clock.sleep)


async def test_rpm_window_makes_the_extra_request_wait_for_the_oldest_to_expire() -> None:
    clock = FakeClock()
    rl = limiter(clock, rpm=2)
    await rl.acquire(1)
    clock.now += 10
    await rl.acquire(1)
    await rl.acquire(1)
    assert clock.sleeps == [50.0]


async def test_input_tpm_window_throttles() -> None:
    clock = FakeClock()
    rl = limiter(clock, input_tpm=100)
    await rl.acquire(80)
    await rl.acquire(30)
    assert clock.sleeps == [60.0]


async def test_output_tpm_window_throttles_on_settled_usage() -> None:
    clock = FakeClock()
    rl = limiter(clock, output_tpm=50)
    slot = await rl.acquire(1)
    rl.settle(slot, Usage(output_tokens=50))
    await rl.acquire(1)
    assert clock.sleeps == [60.0]


async def test_calls_within_the_limits_do_not_wait() -> None:
    clock = FakeClock()
    rl = limiter(clock, rpm=10, input_tpm=1000, output_tpm=1000)
    await asyncio.gather(*(rl.acquire(10) for _ in range(10)))
    assert clock.sleeps == []


async def test_a_request_larger_than_the_budget_still_runs_on_an_empty_window() -> None:
    clock = FakeClock()
    await limiter(clock, input_tpm=10).acquire(500)
    assert clock.sleeps == []


async def test_throttled_completer_reserves_the_estimate_and_settles_real_usage() -> None:
    clock = FakeClock()
    rl = limiter(clock, output_tpm=1)
    completer = ThrottledCompleter(FlakyCompleter(), rl)
    await completer.complete(Chat([Message.text("u", Role.USER, "x" * 40)]), [])
    await completer.complete(Chat(), [])
    assert clock.sleeps == [60.0]


def test_estimate_is_chars_over_4_plus_4_per_message_and_10_per_tool() -> None:
    class T:
        name, description, input_schema = "t", "", {}

    assert estimate_tokens([Message.text("u", Role.USER, "x" * 9)], [T()]) == 3 + 4 + 10


@pytest.mark.parametrize(("value", "seconds"), [("500ms", 0.5), ("2s", 2.0), ("1m", 60.0), (3, 3.0)])
def test_base_delay_accepts_go_durations(value: object, seconds: float) -> None:
    assert RateLimitSettings(base_delay=value).base_delay == seconds  # type: ignore[arg-type]


def test_a_bad_duration_is_rejected() -> None:
    with pytest.raises(ValidationError, match="not a duration"):
        RateLimitSettings(base_delay="soon")  # type: ignore[arg-type]
