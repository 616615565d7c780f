"""The worker's metrics helpers: tool calls counted from the events they pass, the loop's lag."""

from __future__ import annotations

import asyncio
import time
import uuid

from prometheus_client import REGISTRY

from shelly_dist import events
from shelly_dist.events import Event
from shelly_dist.observability import metrics


def test_counting_tools_counts_ended_tool_calls_by_outcome_and_passes_every_event_on():
    tool = uuid.uuid4().hex
    seen: list[Event] = []
    sink = metrics.counting_tools(seen.append)
    sink(Event(kind=events.TOOL_CALL_START, data={"tool": tool}))
    sink(Event(kind=events.TOOL_CALL_END, data={"tool": tool, "is_error": False}))
    sink(Event(kind=events.TOOL_CALL_END, data={"tool": tool, "is_error": True}))
    assert len(seen) == 3
    assert REGISTRY.get_sample_value("shelly_tool_calls_total", {"tool": tool, "outcome": "ok"}) == 1
    assert REGISTRY.get_sample_value("shelly_tool_calls_total", {"tool": tool, "outcome": "error"}) == 1


def test_tool_names_past_the_label_budget_count_as_other(monkeypatch):
    """A model naming tools at random cannot grow the series without end (issue 38: 2,000 in a run)."""
    monkeypatch.setattr(metrics, "_tool_labels", set())
    monkeypatch.setattr(metrics, "TOOL_LABELS", 3)
    names = [uuid.uuid4().hex for _ in range(10)]
    before = REGISTRY.get_sample_value("shelly_tool_calls_total", {"tool": "other", "outcome": "error"}) or 0
    for name in names:
        metrics.tool_call(name, is_error=True)
    labelled = [n for n in names
                if REGISTRY.get_sample_value("shelly_tool_calls_total", {"tool": n, "outcome": "error"})]
    assert labelled == names[:3]
    assert REGISTRY.get_sample_value("shelly_tool_calls_total", {"tool": "other", "outcome": "error"}) == before + 7


async def test_loop_lag_shows_a_blocked_loop():
    watcher = asyncio.create_task(metrics.watch_loop_lag(interval=0.1))
    await asyncio.sleep(0)  # the watcher is asleep on its first interval
    time.sleep(0.3)  # noqa: ASYNC251  # a step doing sync work blocks the loop 0.2 s past the wake-up
    await asyncio.sleep(0.01)  # the watcher wakes (late) before this sleeper
    watcher.cancel()
    assert REGISTRY.get_sample_value("shelly_event_loop_lag_seconds") >= 0.15


def test_a_persons_decision_is_an_intervention_and_a_timeouts_is_not():
    def count(kind: str) -> float:
        return REGISTRY.get_sample_value("shelly_interventions_total", {"kind": kind}) or 0.0

    def observed(kind: str) -> float:
        return REGISTRY.get_sample_value("shelly_decision_latency_seconds_count", {"kind": kind}) or 0.0

    before, latencies = count("approval"), observed("approval")
    metrics.decided("approval", time.time() - 5, by="cli:ana@host")
    metrics.decided("approval", time.time() - 5, by="timeout")
    metrics.decided("approval", time.time(), by="always")
    assert count("approval") == before + 1
    assert observed("approval") == latencies + 3


async def test_the_servers_tokens_per_second_are_observed_per_provider_and_model():
    from shelly_dist.chats import Chat
    from shelly_dist.models.observed import ObservedCompleter
    from shelly_dist.providers.http import aclose_http_client
    from shelly_dist.providers.openai import OpenAICompleter
    from shelly_dist.testing.model_server import ModelServer, Reply

    provider = uuid.uuid4().hex
    with ModelServer(timings=True, default=Reply(text="hi")) as server:
        completer = ObservedCompleter(OpenAICompleter(model="m", base_url=server.url), provider=provider, model="m")
        try:
            await completer.complete(Chat(), [])
        finally:
            await aclose_http_client()
    labels = {"provider": provider, "model": "m"}
    assert REGISTRY.get_sample_value("shelly_model_output_tokens_per_second_count", labels) == 1
    assert REGISTRY.get_sample_value("shelly_model_output_tokens_per_second_sum", labels) == 42.0
