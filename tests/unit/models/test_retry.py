"""Retry (behaviour 80): what is retried, how often, how long, and cancellation."""

from __future__ import annotations

import asyncio

import pytest

from shelly_dist.chats import Chat
from shelly_dist.errors import ModelHTTPError
from shelly_dist.events import PROVIDER_RETRY, Event
from shelly_dist.identity import acting_as
from shelly_dist.models import Backoff, RetryingCompleter
from tests.unit.models.fakes import FlakyCompleter, http_error


def retrying(inner: FlakyCompleter, sleeps: list[float], events: list[Event] | None = None) -> RetryingCompleter:
    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    return RetryingCompleter(
        inner,
        provider="fake",
        backoff=Backoff(base=1.0, rand=lambda: 0.5),
        sleep=sleep,
        on_event=(events.append if events is not None else lambda e: None),
    )


async def test_two_rate_limits_then_success_makes_three_calls_and_two_sleeps() -> None:
    inner, sleeps = FlakyCompleter(http_error("rate_limit"), http_error("rate_limit")), []
    reply = await retrying(inner, sleeps).complete(Chat(), [])
    assert reply.text_content() == "ok"
    assert (inner.calls, sleeps) == (3, [1.0, 2.0])


async def test_exhausted_retries_raise_the_last_error() -> None:
    errors = [http_error("rate_limit") for _ in range(4)]
    inner, sleeps = FlakyCompleter(*errors), []
    with pytest.raises(ModelHTTPError) as info:
        await retrying(inner, sleeps).complete(Chat(), [])
    assert info.value is errors[-1]
    assert inner.calls == 4


@pytest.mark.parametrize("kind", ["auth", "billing", "bad_request"])
async def test_a_non_transient_error_is_not_retried(kind: str) -> None:
    inner, sleeps = FlakyCompleter(http_error(kind)), []
    with pytest.raises(ModelHTTPError):
        await retrying(inner, sleeps).complete(Chat(), [])
    assert (inner.calls, sleeps) == (1, [])


async def test_a_plain_exception_is_not_retried() -> None:
    inner, sleeps = FlakyCompleter(RuntimeError("bug")), []
    with pytest.raises(RuntimeError):
        await retrying(inner, sleeps).complete(Chat(), [])
    assert inner.calls == 1


async def test_retry_after_of_10s_beats_base_1s() -> None:
    inner, sleeps = FlakyCompleter(http_error("rate_limit", retry_after=10.0)), []
    await retrying(inner, sleeps).complete(Chat(), [])
    assert sleeps == [10.0]


async def test_every_retry_emits_a_provider_retry_event_naming_the_agent() -> None:
    inner, sleeps, events = FlakyCompleter(http_error("overloaded")), [], []
    with acting_as("coder-1", run="r1"):
        await retrying(inner, sleeps, events).complete(Chat(), [])
    [event] = events
    assert (event.kind, event.agent, event.run_id) == (PROVIDER_RETRY, "coder-1", "r1")
    assert event.data["provider"] == "fake"
    assert (event.data["attempt"], event.data["delay"], event.data["error_kind"]) == (1, 1.0, "overloaded")


async def test_cancellation_during_a_sleep_ends_the_call() -> None:
    inner = FlakyCompleter(*[http_error("rate_limit") for _ in range(3)])
    sleeping = asyncio.Event()

    async def sleep(_seconds: float) -> None:
        sleeping.set()
        await asyncio.Event().wait()

    completer = RetryingCompleter(inner, provider="fake", sleep=sleep)
    task = asyncio.create_task(completer.complete(Chat(), []))
    await asyncio.wait_for(sleeping.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert inner.calls == 1


async def test_cancellation_from_the_model_is_never_retried() -> None:
    inner, sleeps = FlakyCompleter(asyncio.CancelledError()), []
    with pytest.raises(asyncio.CancelledError):
        await retrying(inner, sleeps).complete(Chat(), [])
    assert (inner.calls, sleeps) == (1, [])


async def test_a_429_the_governor_paused_the_key_for_is_retried_at_once_to_wait_its_turn_there() -> None:
    paused = http_error("rate_limit", retry_after=15.0)
    paused.paused = True
    inner, sleeps = FlakyCompleter(paused), []
    await retrying(inner, sleeps).complete(Chat(), [])
    assert (inner.calls, sleeps) == (2, [0.0])
