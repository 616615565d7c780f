"""Tree limits in the step machine: every model call reserves first, children inherit the scopes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shelly_dist import ScriptedCompleter
from shelly_dist.agent import Agent, AgentOptions, Registry, Run, RunState
from shelly_dist.agent.limits import Budget, Limits, MemoryLedger
from shelly_dist.chats import Message, Role
from shelly_dist.errors import LimitExceeded
from shelly_dist.models.pricing import PriceEntry
from shelly_dist.runtime.local import InlineDelegator
from tests.unit.agent.helpers import call, delegate, echo_toolbox

LOOP = [call("echo", {"text": "again"})]
"""A script that calls a tool forever (the last reply repeats)."""


def agent(name: str, replies: list[Any], ledger: MemoryLedger, limits: Limits | None = None, **budget: Any) -> Agent:
    a = Agent(name, "", completer=ScriptedCompleter(replies, repeat_last=True, name=name),
              options=AgentOptions(max_delegation_depth=1, budget=Budget(ledger, limits, **budget)))
    a.add_toolboxes(echo_toolbox())
    return a


def calls_made(a: Agent) -> int:
    return len(a.completer.requests)  # type: ignore[attr-defined]


async def test_a_run_limited_to_n_model_requests_makes_n_calls_then_fails_naming_the_limit() -> None:
    lead = agent("lead", LOOP, MemoryLedger(), Limits(model_requests=3))
    run = Run.start(lead, run_id="r1")
    with pytest.raises(LimitExceeded, match=r"^limits: tree of run r1 reached model_requests 3$") as info:
        await run.until_done()
    assert calls_made(lead) == 3
    assert (info.value.limit, info.value.scope) == ("model_requests", "r1")


async def test_a_token_limit_below_one_calls_upper_bound_sends_nothing() -> None:
    lead = agent("lead", LOOP, MemoryLedger(), Limits(total_tokens=1000), max_output_tokens=4096)
    with pytest.raises(LimitExceeded, match="reached total_tokens 1000"):
        await Run.start(lead, run_id="r1").until_done()
    assert calls_made(lead) == 0


async def test_a_cost_limit_is_reserved_at_the_price_bound_and_settled_at_the_reported_cost() -> None:
    ledger = MemoryLedger()
    price = PriceEntry(provider="scripted", input=1_000_000.0, output=1_000_000.0)  # a dollar a token
    lead = agent("lead", ["done"], ledger, Limits(cost_usd=500.0), price=price, max_output_tokens=10)
    await Run.start(lead, run_id="r1").until_done()
    used, reserved = await ledger.spent("r1")
    assert used.model_requests == 1 and reserved.cost_usd == pytest.approx(0)
    assert used.cost_usd == 0  # the scripted model reported no cost: settled to the actual, not the estimate


async def test_children_share_their_parents_tree_limit() -> None:
    ledger = MemoryLedger()
    registry = Registry()
    made: list[Agent] = []

    def spawn(name: str, replies: list[Any], limits: Limits | None = None) -> Agent:
        made.append(agent(name, replies, ledger, limits))
        return made[-1]

    registry.register("lead", "", lambda: spawn("lead", [delegate({"agent": "worker", "task": "a"},
                                                                   {"agent": "worker", "task": "b"}), "done"],
                                                 Limits(model_requests=5)))
    registry.register("worker", "", lambda: spawn("worker", LOOP))
    lead = registry.spawn("lead")
    run = Run.start(lead, run_id="root", delegator=InlineDelegator())
    with pytest.raises(LimitExceeded, match="limits: tree of run root reached model_requests 5"):
        await lead.execute(run)
    assert sum(calls_made(a) for a in made) == 5
    entries = json.loads(next(m for m in lead.chat.view() if m.role == Role.TOOL).tool_results()[0].content)
    for entry in entries:
        assert "error" not in entry
        assert entry["completion"]["status"] == "failed"
        assert entry["completion"]["summary"] == (
            'Agent "worker" exhausted its model_requests budget without completing the task.')
        assert entry["completion"]["caveats"].startswith("limits: tree of run root reached model_requests 5.")


async def test_a_child_with_its_own_limits_is_bounded_by_them_inside_its_parents() -> None:
    ledger = MemoryLedger()
    registry = Registry()
    registry.register("lead", "", lambda: agent("lead", [delegate({"agent": "worker", "task": "a"}), "done"],
                                                ledger, Limits(model_requests=50)))
    registry.register("worker", "", lambda: agent("worker", LOOP, ledger, Limits(model_requests=2)))
    lead = registry.spawn("lead")
    reply = await lead.execute(Run.start(lead, run_id="root", delegator=InlineDelegator()))
    assert reply.text_content() == "done"
    entry = json.loads(next(m for m in lead.chat.view() if m.role == Role.TOOL).tool_results()[0].content)[0]
    assert "reached model_requests 2" in entry["completion"]["caveats"]
    used, _ = await ledger.spent("root")
    assert used.model_requests == 1 + 2 + 1  # lead, worker's two, lead's answer


async def test_the_scopes_survive_a_snapshot_and_a_rebuild() -> None:
    ledger = MemoryLedger()
    lead = agent("lead", LOOP, ledger, Limits(model_requests=4))
    run = Run.start(lead, run_id="r1")
    await run.step()  # one model call and its tool
    snapshot = RunState.model_validate_json(run.snapshot().model_dump_json())
    assert [s.id for s in snapshot.scopes] == ["r1"]
    again = agent("lead", LOOP, ledger, Limits(model_requests=4))
    with pytest.raises(LimitExceeded, match="reached model_requests 4"):
        await Run.restore(again, snapshot).until_done()
    assert calls_made(lead) + calls_made(again) == 4


async def test_a_compactions_summary_call_is_reserved_like_any_other() -> None:
    from shelly_dist.agent.effects.compact import Compact

    lead = agent("lead", ["answer"], MemoryLedger(), Limits(model_requests=1))
    lead.options.effects = [Compact(context_window=10, threshold=0.5)]
    lead.chat.append(Message.text("user", Role.USER, "a task long enough to pass five tokens"))
    with pytest.raises(LimitExceeded, match="reached model_requests 1"):
        await Run.start(lead, run_id="r1").until_done()
    assert calls_made(lead) == 1  # the summary took the only request; the main call was refused


async def test_a_failed_call_counts_as_a_request_and_releases_its_reserved_tokens() -> None:
    from shelly_dist.agent.limits import BudgetScope, Charge, LimitedCompleter
    from shelly_dist.chats import Chat
    from shelly_dist.errors import ModelError

    class Down:
        async def complete(self, chat: Chat, tools: list[object]) -> Message:
            raise ModelError('provider "p": HTTP 500')

    ledger = MemoryLedger()
    scopes = [BudgetScope(id="r1", limits=Limits(model_requests=5, total_tokens=10_000))]
    gate = LimitedCompleter(Down(), Budget(ledger, max_output_tokens=100), scopes)
    with pytest.raises(ModelError):
        await gate.complete(Chat([Message.text("user", Role.USER, "hi")]), [])
    assert await ledger.spent("r1") == (Charge(model_requests=1), Charge())
