"""The governed completer: every call reserved and settled in the key's account; a wait near is
waited here, a long one suspends the run (keeping its place); a 429 pauses the key for every
caller; the vendor's headers teach the limits."""

from __future__ import annotations

import pytest

from shelly_dist.chats import Chat, Message, Role
from shelly_dist.errors import ModelHTTPError
from shelly_dist.identity import acting_as
from shelly_dist.models import ToolSpec, Usage
from shelly_dist.models.governor import (
    BATCH,
    GOVERNOR,
    GovernedCompleter,
    KeyLimits,
    MemoryGovernorStore,
    learned_from,
)
from shelly_dist.models.governor.base import WINDOW
from shelly_dist.models.governor.headers import heard, hearing, seconds
from shelly_dist.models.governor.memory import TOLERANCE
from shelly_dist.models.suspend import ModelCall, SuspendModel, calling_model
from tests.unit.models.fakes import FakeClock, FlakyCompleter, http_error


def governed(inner: object, clock: FakeClock, store: MemoryGovernorStore | None = None, **limits: int
             ) -> GovernedCompleter:
    return GovernedCompleter(inner, store=store or MemoryGovernorStore(), unit="openai-k:m",  # type: ignore[arg-type]
                             provider="openai", model="m", limits=KeyLimits(**limits), clock=clock, sleep=clock.sleep)


def chat() -> Chat:
    return Chat([Message.text("u", Role.USER, "hello")])


async def test_a_short_wait_is_waited_in_the_process() -> None:
    clock = FakeClock()
    completer = governed(FlakyCompleter(), clock, rpm=40)
    with acting_as(priority=BATCH):
        await completer.complete(chat(), [])
        await completer.complete(chat(), [])
    assert clock.sleeps == [pytest.approx(WINDOW / 40 - TOLERANCE)]


async def test_a_long_wait_suspends_a_run_that_can_and_keeps_its_reservation() -> None:
    clock = FakeClock()
    store = MemoryGovernorStore()
    completer = governed(FlakyCompleter(), clock, store, rpm=1)
    await completer.complete(chat(), [])
    with calling_model(ModelCall(can_suspend=True)), pytest.raises(SuspendModel) as info:
        await completer.complete(chat(), [])
    signal = info.value
    assert signal.kind == GOVERNOR and signal.reason == "the openai key: rpm"
    assert signal.due_at is not None and clock.now + WINDOW - 2 <= signal.due_at <= clock.now + WINDOW
    assert clock.sleeps == []

    from shelly_dist.models.suspend import ModelWait

    clock.now = signal.due_at
    previous = ModelWait.of(signal, "r1", 0, None)
    with calling_model(ModelCall(can_suspend=True, previous=previous)):
        await completer.complete(chat(), [])  # its turn: waits the last second here, then goes
    assert len(clock.sleeps) >= 1 and sum(clock.sleeps) <= 2.0


async def test_a_caller_that_cannot_suspend_waits_however_long() -> None:
    clock = FakeClock()
    completer = governed(FlakyCompleter(), clock, rpm=1)
    await completer.complete(chat(), [])
    await completer.complete(chat(), [])
    assert sum(clock.sleeps) == pytest.approx(WINDOW, abs=0.1)


async def test_a_429_with_retry_after_pauses_the_key_for_every_caller() -> None:
    clock = FakeClock()
    store = MemoryGovernorStore()
    first = governed(FlakyCompleter(http_error("rate_limit", retry_after=15.0)), clock, store)
    with pytest.raises(ModelHTTPError) as info:
        await first.complete(chat(), [])
    assert info.value.paused
    other = governed(FlakyCompleter(), clock, store)  # another completer of the same key (another agent)
    await other.complete(chat(), [])
    assert sum(clock.sleeps) == pytest.approx(15.0, abs=0.01)


async def test_the_headers_of_each_answer_teach_the_keys_limits() -> None:
    clock = FakeClock()
    store = MemoryGovernorStore()

    class Vendor:
        async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
            heard({"x-ratelimit-limit-requests": "30", "x-ratelimit-limit-tokens": "150000",
                   "x-ratelimit-remaining-requests": "29", "content-type": "application/json"})
            return Usage(input_tokens=5, output_tokens=1).attach(Message.text("", Role.ASSISTANT, "ok"))

    await governed(Vendor(), clock, store).complete(chat(), [])
    assert await store.limits("openai-k:m") == KeyLimits(rpm=30, input_tpm=150000)


def test_headers_are_only_kept_for_a_call_that_listens() -> None:
    heard({"x-ratelimit-limit-requests": "30"})  # nobody listens: nothing happens
    got: list[dict[str, str]] = []
    with hearing(lambda h: got.append(dict(h))):
        heard({"X-RateLimit-Limit-Requests": "30", "Server": "x"})
    assert got == [{"x-ratelimit-limit-requests": "30"}]


def test_openai_and_anthropic_headers_say_limits_and_pauses() -> None:
    now = 1_800_000_000.0
    openai = learned_from({"x-ratelimit-limit-requests": "60", "x-ratelimit-limit-tokens": "90000",
                           "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "6m0s"}, now)
    assert openai.limits == KeyLimits(rpm=60, input_tpm=90000) and openai.pause_until == now + 360
    anthropic = learned_from({"anthropic-ratelimit-requests-limit": "50",
                              "anthropic-ratelimit-input-tokens-limit": "40000",
                              "anthropic-ratelimit-output-tokens-limit": "8000",
                              "anthropic-ratelimit-requests-remaining": "12"}, now)
    assert anthropic.limits == KeyLimits(rpm=50, input_tpm=40000, output_tpm=8000) and anthropic.pause_until == 0
    rejected = learned_from({"retry-after": "15"}, now, rejected=True)
    assert rejected.pause_until == now + 15


@pytest.mark.parametrize(("text", "value"), [("1s", 1.0), ("6m0s", 360.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5),
                                             ("2.5", 2.5), ("2026-01-01T00:00:10Z", 10.0), ("soon", None)])
def test_resets_read_as_the_vendors_write_them(text: str, value: float | None) -> None:
    now = 1767225600.0  # 2026-01-01T00:00:00Z
    assert seconds(text, now) == value


async def test_a_failed_call_gives_its_slot_in_flight_back() -> None:
    clock = FakeClock()
    store = MemoryGovernorStore()
    failing = governed(FlakyCompleter(http_error("server")), clock, store, max_concurrent=1)
    with pytest.raises(ModelHTTPError):
        await failing.complete(chat(), [])
    await governed(FlakyCompleter(), clock, store, max_concurrent=1).complete(chat(), [])
    assert clock.sleeps == []
