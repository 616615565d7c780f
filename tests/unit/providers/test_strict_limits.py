"""The strict stand-in vendor: sliding-window limits refused with 429, ``retry-after`` and the
vendors' headers, a "429 everything" spell, and the governed completer against it over HTTP."""

from __future__ import annotations

import asyncio

import pytest

from shelly_dist.chats import Chat, Message, Role
from shelly_dist.errors import ModelHTTPError
from shelly_dist.models.governor import MemoryGovernorStore
from shelly_dist.providers.factory import create_completer
from shelly_dist.testing.model_server import ModelServer
from shelly_dist.testing.strict_limits import StrictLimits


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_request_past_the_minutes_limit_is_refused_with_when_to_come_back() -> None:
    clock = Clock()
    limits = StrictLimits(rpm=2, clock=clock)
    assert limits.judge({}).status == 200
    clock.now += 10
    ok = limits.judge({})
    assert ok.status == 200 and ok.headers["x-ratelimit-remaining-requests"] == "0"
    refused = limits.judge({})
    assert refused.status == 429 and refused.headers["retry-after"] == "50"
    clock.now += 50.01
    assert limits.judge({}).status == 200
    assert (len(limits.accepted), len(limits.rejected), limits.max_in_any_window()) == (3, 1, 2)


def test_input_tokens_per_minute_are_counted_from_the_body() -> None:
    limits = StrictLimits(input_tpm=100, clock=Clock())
    assert limits.judge({"text": "x" * 300}).status == 200
    assert limits.judge({"text": "x" * 200}).status == 429


def test_reject_all_refuses_everything_for_its_time_with_that_retry_after() -> None:
    clock = Clock()
    limits = StrictLimits(rpm=1000, clock=clock)
    limits.reject_all(15)
    refused = limits.judge({})
    assert refused.status == 429 and refused.headers["retry-after"] == "15"
    clock.now += 15
    assert limits.judge({}).status == 200


def test_anthropic_answers_carry_anthropics_headers() -> None:
    verdict = StrictLimits(rpm=50, input_tpm=1000, clock=Clock()).judge({}, anthropic=True)
    assert verdict.headers["anthropic-ratelimit-requests-limit"] == "50"
    assert verdict.headers["anthropic-ratelimit-input-tokens-limit"] == "1000"


async def test_a_governed_provider_learns_the_limit_from_the_headers_and_is_never_refused() -> None:
    with ModelServer(limits=StrictLimits(rpm=3)) as server:
        completer = create_completer("openai", name="strict", model="m", base_url=server.url, api_key="k",
                                     governor=MemoryGovernorStore())
        chat = Chat([Message.text("u", Role.USER, "hi")])
        await completer.complete(chat, [])  # the first answer says: 3 per minute
        replies = await asyncio.gather(*(completer.complete(chat, []) for _ in range(2)))
        assert len(replies) == 2 and server.limits is not None and server.limits.rejected == []
        task = asyncio.ensure_future(completer.complete(chat, []))  # the 4th waits for the minute
        await asyncio.sleep(0.5)
        assert not task.done()
        task.cancel()
    assert len(server.requests) == 3


async def test_a_429_everything_spell_is_heard_once_and_waited_out() -> None:
    with ModelServer(limits=StrictLimits(rpm=1000)) as server:
        assert server.limits is not None
        server.limits.reject_all(2)
        completer = create_completer("openai", name="strict", model="m", base_url=server.url, api_key="k",
                                     governor=MemoryGovernorStore())
        chat = Chat([Message.text("u", Role.USER, "hi")])
        replies = await asyncio.gather(*(completer.complete(chat, []) for _ in range(5)))
    assert len(replies) == 5
    assert len(server.limits.rejected) <= 5  # the calls in flight when it began; none after it was heard
    first_refusal = min(server.limits.rejected)
    after = [r.arrived for r in server.requests if r.arrived > first_refusal + 0.5]
    assert all(a >= first_refusal + 1.9 for a in after)


async def test_without_a_governor_pause_a_429_is_an_error_after_the_retries() -> None:
    with ModelServer(limits=StrictLimits(rpm=1000)) as server:
        assert server.limits is not None
        server.limits.reject_all(30)
        completer = create_completer("openai", name="strict", model="m", base_url=server.url, api_key="k",
                                     rate_limit=None, governor=MemoryGovernorStore())
        completer.max_retries = 0
        with pytest.raises(ModelHTTPError, match="429"):
            await completer.complete(Chat([Message.text("u", Role.USER, "hi")]), [])
