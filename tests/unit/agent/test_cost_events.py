"""A priced call's cost reaches the run's usage and its ``message_added`` event."""

from __future__ import annotations

import pytest

from shelly_dist import ScriptedCompleter
from shelly_dist.agent import Agent, AgentOptions, Run
from shelly_dist.events import MESSAGE_ADDED, Event
from shelly_dist.models import Usage
from shelly_dist.models.pricing import PricedCompleter, PriceEntry


async def test_message_added_and_the_run_usage_carry_the_calls_cost() -> None:
    seen: list[Event] = []
    scripted = ScriptedCompleter(["hello there"])
    price = PriceEntry(provider="scripted", input=1_000_000.0, output=2_000_000.0)  # 1 and 2 USD a token
    agent = Agent("solo", completer=PricedCompleter(scripted, price), options=AgentOptions(on_event=seen.append))
    run = Run.start(agent)
    reply = await run.until_done()
    call = Usage.of(reply)
    assert call.cost_usd == pytest.approx(call.input_tokens * 1.0 + call.output_tokens * 2.0) and call.cost_usd > 0
    (added,) = [e for e in seen if e.kind == MESSAGE_ADDED]
    assert added.data["usage"]["cost_usd"] == pytest.approx(call.cost_usd)
    assert added.data["usage"]["model_requests"] == 1
    assert run.state.usage.cost_usd == pytest.approx(call.cost_usd) and run.state.usage.model_requests == 1


async def test_the_calls_cost_is_counted_per_agent_in_the_metrics() -> None:
    from shelly_dist.observability import metrics

    before = metrics.AGENT_COST.labels("pricey")._value.get()
    price = PriceEntry(provider="scripted", input=1_000_000.0, output=1_000_000.0)
    agent = Agent("pricey", completer=PricedCompleter(ScriptedCompleter(["hi"]), price))
    reply = await Run.start(agent).until_done()
    assert metrics.AGENT_COST.labels("pricey")._value.get() - before == pytest.approx(Usage.of(reply).cost_usd)
