"""``create_completer`` and ``with_fallback`` end to end against loopback servers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from shelly_dist.errors import ConfigError, ModelHTTPError
from shelly_dist.events import PROVIDER_FALLBACK, PROVIDER_RETRY, Event
from shelly_dist.models import MemoryCooldownStore, MemoryGovernorStore, RateLimitSettings
from shelly_dist.providers.factory import create_completer, provider_kinds, register_provider, with_fallback
from shelly_dist.providers.openai import OpenAICompleter
from shelly_dist.testing.model_server import ModelServer, Reply
from tests.unit.providers.conftest import chat_of, user


class Recorder:
    """Injected sleep, clock and event sink: records instead of waiting (the clock moves by what
    was slept)."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []
        self.events: list[Event] = []
        self.now = 1_800_000_000.0

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


@pytest.fixture
def backup() -> Iterator[ModelServer]:
    with ModelServer(default=Reply(text="from backup")) as s:
        yield s


def build(server: ModelServer, rec: Recorder, kind: str = "openai", **kw: object):  # type: ignore[no-untyped-def]
    kw.setdefault("name", kind)
    kw.setdefault("governor", MemoryGovernorStore())
    return create_completer(
        kind, model="m", base_url=server.url, api_key="k", sleep=rec.sleep, clock=rec.clock,
        on_event=rec.events.append, **kw
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("anthropic", "/v1/messages"),
        ("openai", "/v1/chat/completions"),
        ("grok", "/v1/chat/completions"),
        ("gemini", "/v1beta/models/m:generateContent"),
    ],
)
async def test_each_kind_speaks_its_wire_format(server: ModelServer, rec: Recorder, kind: str, path: str) -> None:
    reply = await build(server, rec, kind).complete(chat_of(user()), [])
    assert reply.text_content() == "ok"
    assert server.requests[0].path == path


def test_an_unknown_kind_is_a_config_error_naming_the_field() -> None:
    with pytest.raises(ConfigError, match='provider "p": unknown kind') as info:
        create_completer("nope", name="p", model="m")
    assert info.value.field == "providers.p.kind"


async def test_a_registered_kind_is_built_by_its_factory(server: ModelServer, rec: Recorder) -> None:
    register_provider("my-compat", OpenAICompleter)
    assert "my-compat" in provider_kinds()
    await build(server, rec, "my-compat").complete(chat_of(user()), [])
    assert server.requests[0].path == "/v1/chat/completions"


async def test_a_429s_retry_after_pauses_the_key_and_the_retry_waits_it_out_at_the_governor(
    server: ModelServer, rec: Recorder
) -> None:
    server.push(Reply.error(429, retry_after="7"))
    reply = await build(server, rec).complete(chat_of(user()), [])
    assert reply.text_content() == "ok"
    assert len(server.requests) == 2
    assert rec.sleeps == [0.0, pytest.approx(7.0)]  # the retry goes at once; the paused key holds it 7 s
    [event] = rec.events
    assert event.kind == PROVIDER_RETRY
    assert event.data["provider"] == "openai"
    assert (event.data["attempt"], event.data["error_kind"], event.data["delay"]) == (1, "rate_limit", 0.0)


async def test_a_429_without_retry_after_is_retried_after_its_backoff(server: ModelServer, rec: Recorder) -> None:
    server.push(Reply.error(429))
    await build(server, rec).complete(chat_of(user()), [])
    assert len(server.requests) == 2 and 0.75 <= rec.sleeps[0] <= 1.25


async def test_overloaded_server_and_malformed_answers_are_retried(server: ModelServer, rec: Recorder) -> None:
    server.push(Reply.error(529), Reply.error(500), Reply(malformed=True))
    await build(server, rec).complete(chat_of(user()), [])
    assert len(server.requests) == 4
    assert [e.data["error_kind"] for e in rec.events] == ["overloaded", "server", "server"]


async def test_a_slow_answer_is_retried_as_a_timeout(server: ModelServer, rec: Recorder) -> None:
    server.push(Reply(delay=30))
    await build(server, rec, timeout=0.2).complete(chat_of(user()), [])
    assert [e.data["error_kind"] for e in rec.events] == ["timeout"]


@pytest.mark.parametrize("status", [401, 402, 400])
async def test_auth_billing_and_bad_requests_are_never_retried(server: ModelServer, rec: Recorder, status: int) -> None:
    server.push(Reply.error(status))
    with pytest.raises(ModelHTTPError):
        await build(server, rec).complete(chat_of(user()), [])
    assert len(server.requests) == 1
    assert rec.sleeps == []


async def test_retries_stop_at_rate_limit_max_retries(server: ModelServer, rec: Recorder) -> None:
    server.push(*[Reply.error(503)] * 5)
    with pytest.raises(ModelHTTPError) as info:
        await build(server, rec, rate_limit=RateLimitSettings(max_retries=2, base_delay="10ms")).complete(
            chat_of(user()), []
        )
    assert info.value.kind == "overloaded"
    assert len(server.requests) == 3
    assert all(0.0075 <= d <= 0.05 for d in rec.sleeps) and len(rec.sleeps) == 2


async def test_api_keys_are_rotated_round_robin(server: ModelServer, rec: Recorder) -> None:
    completer = build(server, rec, api_keys=["k1", "k2", "k3"], cooldowns=MemoryCooldownStore())
    for _ in range(4):
        await completer.complete(chat_of(user()), [])
    keys = [r.headers["authorization"] for r in server.requests]
    assert keys == ["Bearer k1", "Bearer k2", "Bearer k3", "Bearer k1"]
    assert completer.usage is not None and completer.usage.count() == 4


async def test_a_paused_key_is_passed_over_for_the_next_until_its_pause_ends(server: ModelServer,
                                                                             rec: Recorder) -> None:
    completer = build(server, rec, api_keys=["k1", "k2"], cooldowns=MemoryCooldownStore())
    server.push(Reply.error(429, retry_after="30"))
    for _ in range(3):
        await completer.complete(chat_of(user()), [])
    keys = [r.headers["authorization"] for r in server.requests]
    assert keys == ["Bearer k1", "Bearer k2", "Bearer k2", "Bearer k2"]
    assert rec.sleeps == []  # nobody waited for k1: its calls went to k2


async def test_a_failing_key_cools_down_and_is_skipped(server: ModelServer, rec: Recorder) -> None:
    cooldowns = MemoryCooldownStore()
    completer = build(server, rec, api_keys=["k1", "k2"], cooldowns=cooldowns)
    server.push(Reply.error(500))
    for _ in range(3):
        await completer.complete(chat_of(user()), [])
    keys = [r.headers["authorization"] for r in server.requests]
    assert keys == ["Bearer k1", "Bearer k2", "Bearer k2", "Bearer k2"]
    assert rec.sleeps == []


async def test_two_concurrent_calls_to_one_provider_overlap(server: ModelServer, rec: Recorder) -> None:
    """Each answer is held until both requests have arrived: a serialised client would never get there."""
    server.push(Reply(hold_until=2), Reply(hold_until=2))
    completer = build(server, rec, rate_limit=RateLimitSettings(rpm=100, input_tpm=100_000))
    replies = await asyncio.gather(*(completer.complete(chat_of(user(f"child {i}")), []) for i in range(2)))
    assert [r.text_content() for r in replies] == ["ok", "ok"]
    first, second = sorted(server.requests, key=lambda r: r.arrived)
    assert second.arrived < first.answered
    assert completer.usage is not None and completer.usage.total().input_tokens == 20


async def test_fallback_goes_to_the_next_provider_and_cools_the_first_down(
    server: ModelServer, backup: ModelServer, rec: Recorder
) -> None:
    server.default = Reply.error(529)
    no_retry = RateLimitSettings(max_retries=0)
    primary = build(server, rec, name="main", rate_limit=no_retry)
    secondary = build(backup, rec, name="spare")
    chain = with_fallback(
        ("main", primary), [("spare", secondary)], cooldowns=MemoryCooldownStore(), on_event=rec.events.append
    )
    assert (await chain.complete(chat_of(user()), [])).text_content() == "from backup"
    [event] = [e for e in rec.events if e.kind == PROVIDER_FALLBACK]
    assert event.data == {
        "provider": "main",
        "from": "main",
        "to": "spare",
        "error_kind": "overloaded",
        "error": event.data["error"],
    }
    await chain.complete(chat_of(user()), [])
    assert len(server.requests) == 1
    assert len(backup.requests) == 2


async def test_billing_falls_back_but_auth_does_not(server: ModelServer, backup: ModelServer, rec: Recorder) -> None:
    chain = with_fallback(
        ("main", build(server, rec, name="main")),
        [("spare", build(backup, rec, name="spare"))],
        cooldowns=MemoryCooldownStore(),
    )
    server.push(Reply.error(402), Reply.error(401))
    assert (await chain.complete(chat_of(user()), [])).text_content() == "from backup"
    chain = with_fallback(
        ("main", build(server, rec, name="main")),
        [("spare", build(backup, rec, name="spare"))],
        cooldowns=MemoryCooldownStore(),
    )
    with pytest.raises(ModelHTTPError) as info:
        await chain.complete(chat_of(user()), [])
    assert info.value.kind == "auth"
    assert len(backup.requests) == 1
