"""A model call that suspends (``SuspendModel``): the run journals the waiting call, suspends, and
continues when the wait is due (the call asked again, with the previous wait visible to the
completer) or when a reply is delivered (the model is not asked again)."""

from __future__ import annotations

import asyncio
import time

import pytest

from shelly_dist import Message, Role, ScriptedCompleter
from shelly_dist.agent import Agent, AgentOptions, Run, RunState, Suspended
from shelly_dist.agent.limits import Budget, Limits, MemoryLedger
from shelly_dist.chats import Chat
from shelly_dist.models import ToolSpec, Usage
from shelly_dist.models.suspend import ModelWait, SuspendModel, model_call
from shelly_dist.runtime.local import InlineDelegator

from .helpers import Team, echo_toolbox


def suspending(*replies: object) -> tuple[Team, Agent]:
    team = Team()
    team.add("worker", list(replies), toolboxes=(echo_toolbox(),))
    return team, team.spawn("worker")


async def test_a_suspended_call_is_asked_again_when_due_and_the_run_finishes() -> None:
    team, agent = suspending({"text": "hello", "suspend": 0.05})
    run = Run.start(agent, [Message.text("user", Role.USER, "go")], delegator=InlineDelegator())
    reply = await run.until_done()
    assert reply.text_content() == "hello"
    assert len(team.requests("worker")) == 2  # asked, suspended, asked again
    assert run.state.model_wait is None and run.state.iteration == 1


async def test_a_suspension_journals_the_wait_and_survives_json() -> None:
    team, agent = suspending({"text": "hello", "suspend": 30})
    run = Run.start(agent, [Message.text("user", Role.USER, "go")], run_id="r1")
    outcome = await run.step()
    assert isinstance(outcome, Suspended) and outcome.requests == []
    wait = outcome.model
    assert wait is not None and wait.id == "r1:0:1" and wait.kind == "scripted" and wait.reply is None
    assert wait.due_at is not None and wait.due_at > time.time() + 20
    assert run.model_waiting() and not run.waiting()

    state = RunState.model_validate_json(run.snapshot().model_dump_json())  # another worker, later
    assert state.model_wait == wait
    resumed = Run.rebuild(team.registry, state)
    assert resumed.model_waiting()


async def test_a_delivered_reply_answers_the_call_and_the_model_is_not_asked_again() -> None:
    team, agent = suspending({"text": "never sent", "suspend": "reply"}, "after")
    run = Run.start(agent, [Message.text("user", Role.USER, "go")], run_id="r1")
    outcome = await run.step()
    assert isinstance(outcome, Suspended) and outcome.model is not None
    assert outcome.model.due_at is None  # only a delivery ends it
    delivered = Usage(input_tokens=7, output_tokens=3, cost_usd=0.5).attach(
        Message.text("", Role.ASSISTANT, "from the batch"))
    assert run.deliver_reply(outcome.model.id, delivered) is True
    assert run.deliver_reply(outcome.model.id, Message.text("", Role.ASSISTANT, "again")) is False  # once
    reply = await run.until_done()
    assert reply.text_content() == "from the batch"
    assert len(team.requests("worker")) == 1
    assert (run.state.usage.input_tokens, run.state.usage.cost_usd, run.state.usage.model_requests) == (7, 0.5, 1)


async def test_a_delivery_for_an_earlier_wait_is_ignored() -> None:
    _, agent = suspending({"text": "x", "suspend": "reply"})
    run = Run.start(agent, [Message.text("user", Role.USER, "go")], run_id="r1")
    await run.step()
    assert run.deliver_reply("r1:0:0", Message.text("", Role.ASSISTANT, "stale")) is False
    assert run.model_waiting()


async def test_a_run_waiting_in_process_takes_a_reply_delivered_by_another_task() -> None:
    waiting = asyncio.Event()
    agent = Agent("a", "", completer=ScriptedCompleter([{"text": "never sent", "suspend": "reply"}], name="a"),
                  options=AgentOptions(on_event=lambda e: waiting.set() if e.kind == "model_waiting" else None))
    run = Run.start(agent, [Message.text("user", Role.USER, "go")], delegator=InlineDelegator())
    task = asyncio.create_task(run.until_done())
    await asyncio.wait_for(waiting.wait(), 10)
    assert run.state.model_wait is not None
    run.deliver_reply(run.state.model_wait.id, Message.text("", Role.ASSISTANT, "delivered"))
    assert (await asyncio.wait_for(task, 10)).text_content() == "delivered"


class _Remembering:
    """Suspends once, then answers with what it was told about the previous wait."""

    def __init__(self) -> None:
        self.seen: list[ModelWait | None] = []

    async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
        call_ = model_call()
        self.seen.append(call_.previous)
        if call_.previous is None:
            raise SuspendModel("governor", {"ticket": "t-1"}, time.time() - 1, reason="the key: rpm")
        return Message.text("", Role.ASSISTANT, f"ticket {call_.previous.payload['ticket']}")


async def test_the_call_asked_again_sees_its_previous_wait_and_the_tools_are_not_rebuilt_by_effects() -> None:
    completer = _Remembering()
    agent = Agent("a", "", completer=completer)
    agent.add_toolboxes(echo_toolbox())
    run = Run.start(agent, [Message.text("user", Role.USER, "go")], run_id="r9")
    outcome = await run.step()
    assert isinstance(outcome, Suspended) and outcome.model is not None and outcome.model.reason == "the key: rpm"
    assert not run.model_waiting()  # due already
    reply = await run.until_done()
    assert reply.text_content() == "ticket t-1"
    assert completer.seen[0] is None and completer.seen[1] is not None and completer.seen[1].id == "r9:0:1"


async def test_a_caller_that_cannot_suspend_waits_the_scripted_seconds_instead() -> None:
    completer = ScriptedCompleter([{"text": "late", "suspend": 0.01}])
    reply = await completer.complete(Chat(), [])
    assert reply.text_content() == "late"


async def test_a_suspended_call_charges_nothing_to_the_tree_limits_and_a_delivered_one_its_usage() -> None:
    ledger = MemoryLedger()
    agent = Agent("a", "", completer=ScriptedCompleter([{"text": "x", "suspend": "reply"}, "y"], name="a"),
                  options=AgentOptions(budget=Budget(ledger, Limits(model_requests=5))))
    agent.add_toolboxes(echo_toolbox())
    run = Run.start(agent, [Message.text("user", Role.USER, "go")], run_id="r1")
    outcome = await run.step()
    assert outcome.model is not None  # type: ignore[union-attr]
    used, reserved = await ledger.spent("r1")
    assert (used.model_requests, reserved.model_requests) == (0, 0)
    run.deliver_reply(outcome.model.id,  # type: ignore[union-attr]
                      Usage(input_tokens=10, output_tokens=2).attach(Message.text("", Role.ASSISTANT, "d")))
    await run.step()
    used, _ = await ledger.spent("r1")
    assert (used.model_requests, used.total_tokens) == (1, 12)


async def test_a_suspension_passes_through_retry_and_fallback_untouched() -> None:
    from shelly_dist.models import MemoryCooldownStore, RetryingCompleter, with_fallback

    class Suspends:
        calls = 0

        async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
            Suspends.calls += 1
            raise SuspendModel("governor", {}, None)

    other = ScriptedCompleter(["from the fallback"])
    chain = with_fallback(("p", RetryingCompleter(Suspends(), provider="p")), [("q", other)],
                          cooldowns=MemoryCooldownStore())
    with pytest.raises(SuspendModel):
        await chain.complete(Chat(), [])
    assert Suspends.calls == 1 and other.calls == 0
