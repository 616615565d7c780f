"""token_budget and time_budget: a warning once, then the run ends with Shelly's errors; a child
that exhausts one reports Shelly's synthetic failed completion."""

from __future__ import annotations

import json

import pytest

from shelly_dist import Agent, AgentOptions, Message, Registry, Role, ScriptedCompleter
from shelly_dist.agent.effects import EffectPhase, IterationContext
from shelly_dist.agent.effects.budgets import TimeBudget, TokenBudget
from shelly_dist.chats import Chat
from shelly_dist.errors import TimeBudgetExhausted, TokenBudgetExhausted
from shelly_dist.models import Usage
from shelly_dist.providers.scripted import FunctionCompleter

from ..helpers import delegate
from .support import reply


def budget_agent(name: str, effects: list, tokens_per_call: int) -> Agent:
    def answer(messages: list[Message], tools: list) -> Message:
        return reply(calls=[("echo_nothing", {})], input_tokens=tokens_per_call, output_tokens=0)

    options = AgentOptions(effects=effects, max_iterations=50)  # bounds a budget that never fires
    return Agent(name, "", completer=FunctionCompleter(answer), options=options)


async def test_token_budget_warns_once_then_ends_the_run():
    agent = budget_agent("tester", [TokenBudget(max_tokens=100, warn_threshold=0.5)], tokens_per_call=30)
    with pytest.raises(TokenBudgetExhausted, match="agent: token budget exhausted"):
        await agent.run("go")
    warnings = [m.text_content() for m in agent.chat.view() if "of your token budget" in m.text_content()]
    assert warnings == ["You've used 60% of your token budget (60/100 tokens). "
                        "Prioritize completing the most critical remaining work."]
    assert sum(1 for m in agent.chat.view() if m.role == Role.ASSISTANT) == 4  # 30, 60, 90, 120


async def test_zero_max_tokens_is_no_budget():
    completer = ScriptedCompleter([Usage(input_tokens=10**9).attach(Message.text("", Role.ASSISTANT, "done"))])
    agent = Agent("tester", "", completer=completer, options=AgentOptions(effects=[TokenBudget(max_tokens=0)]))
    assert (await agent.run("go")).text_content() == "done"


def clocked(times: list[float]) -> IterationContext:
    chat = Chat()
    return IterationContext(phase=EffectPhase.BEFORE_COMPLETE, iteration=0, chat=chat,
                            completer=ScriptedCompleter([]), agent_name="tester", usage=Usage(),
                            clock=lambda: times.pop(0))


async def test_time_budget_counts_model_time_only_and_ends_the_run():
    effect = TimeBudget(max_duration=10.0, warn_threshold=0.5)
    ic = clocked([100.0, 106.0, 500.0, 505.0])  # 6 s of model time, a long wait, then 5 s more
    await effect.evaluate(ic)
    ic.phase = EffectPhase.AFTER_COMPLETE
    await effect.evaluate(ic)
    assert ic.chat.view()[-1].text_content() == (
        "You've used 60% of your time budget (6s/10s of LLM inference time). "
        "Prioritize completing the most critical remaining work.")
    ic.phase = EffectPhase.BEFORE_COMPLETE
    await effect.evaluate(ic)  # 394 s between the calls (children, queues) never count
    ic.phase = EffectPhase.AFTER_COMPLETE
    with pytest.raises(TimeBudgetExhausted, match="agent: time budget exhausted"):
        await effect.evaluate(ic)
    assert ic.state["elapsed"] == pytest.approx(11.0)


@pytest.mark.parametrize(("effect", "word"), [(TokenBudget(max_tokens=10), "token"),
                                               (TimeBudget(max_duration=0.000001), "time")])
async def test_a_child_out_of_budget_reports_a_failed_completion_not_an_error(effect, word):
    registry = Registry()
    registry.register("lead", "", lambda: Agent(
        "lead", "", completer=ScriptedCompleter([delegate({"agent": "worker", "task": "dig"}), "done"]),
        options=AgentOptions(max_delegation_depth=1)))
    registry.register("worker", "", lambda: budget_agent("worker", [effect], tokens_per_call=50))
    lead = registry.spawn("lead")
    await lead.run("go")
    tool_message = next(m for m in lead.chat.view() if m.role == Role.TOOL)
    entry = json.loads(tool_message.tool_results()[0].content)[0]
    assert "error" not in entry
    assert entry["completion"] == {
        "status": "failed",
        "summary": f'Agent "worker" exhausted its {word} budget without completing the task.',
        "caveats": f"{word.capitalize()} budget exhausted. Check progress notes for partial work.",
    }
