"""The metered completer: each call's latency, tokens and cost land in the worker's metrics."""

from __future__ import annotations

import uuid

import pytest
from prometheus_client import REGISTRY

from shelly_dist.chats import Chat, Message, Role
from shelly_dist.models.observed import ObservedCompleter
from shelly_dist.models.usage import Usage


class Fixed:
    async def complete(self, chat: Chat, tools: list[object]) -> Message:
        return Usage(input_tokens=30, output_tokens=7, cost_usd=0.5).attach(Message.text("m", Role.ASSISTANT, "hi"))


class Failing:
    async def complete(self, chat: Chat, tools: list[object]) -> Message:
        raise RuntimeError("down")


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_call_adds_its_tokens_cost_and_latency_under_provider_and_model():
    model = uuid.uuid4().hex  # a label of this test's own: the registry is the process's
    await ObservedCompleter(Fixed(), provider="p", model=model).complete(Chat(), [])  # type: ignore[arg-type]
    assert sample("shelly_model_tokens_total", provider="p", model=model, kind="input") == 30
    assert sample("shelly_model_tokens_total", provider="p", model=model, kind="output") == 7
    assert sample("shelly_model_cost_usd_total", provider="p", model=model) == 0.5
    assert sample("shelly_model_call_duration_seconds_count", provider="p", model=model) == 1


async def test_a_failed_call_is_counted_as_an_error_and_timed():
    model = uuid.uuid4().hex
    with pytest.raises(RuntimeError):
        await ObservedCompleter(Failing(), provider="p", model=model).complete(Chat(), [])  # type: ignore[arg-type]
    assert sample("shelly_model_call_errors_total", provider="p", model=model) == 1
    assert sample("shelly_model_call_duration_seconds_count", provider="p", model=model) == 1
