"""The approval gate in the step machine: which calls it gates, and what each verdict does —
approved calls run (once, with edited arguments when given), rejected ones give the model the
reason, a call nobody can approve is rejected, and a suspended approval is delivered later."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shelly_dist import Message, Role
from shelly_dist.agent import Run, Suspended
from shelly_dist.agent.approval import ApprovalPolicy
from shelly_dist.chats import ToolResult
from shelly_dist.tools import Tool, ToolBox
from shelly_dist.tools.builtin.ask import Responder, SuspendingAnswerer
from shelly_dist.tools.decisions import APPROVAL, Approval, Verdict

from .helpers import Team, call, calls


class Recorder:
    """A toolbox ``ops`` with ``deploy`` (recording each run's arguments) and ``look``."""

    def __init__(self) -> None:
        self.ran: list[dict[str, Any]] = []

        async def deploy(arguments: str) -> str:
            self.ran.append(json.loads(arguments))
            return "deployed"

        async def look(arguments: str) -> str:
            return "looked"

        self.box = ToolBox([Tool("deploy", "deploy", {"type": "object"}, deploy, group="release"),
                            Tool("look", "look", {"type": "object"}, look)], name="ops")


class Decider:
    """Answers every approval with the next verdict of ``verdicts`` and keeps what it was asked."""

    def __init__(self, *verdicts: Verdict) -> None:
        self.verdicts = list(verdicts)
        self.asked: list[Approval] = []

    async def decide(self, approval: Approval, session: str = "") -> Verdict:
        self.asked.append(approval)
        return self.verdicts.pop(0)


def results(run: Run) -> list[ToolResult]:
    return [p for m in run.agent.chat.messages() if m.role == Role.TOOL for p in m.parts]  # type: ignore[misc]


async def run_to_end(tools: Recorder, decider: Any, replies: list[Any], **options: Any) -> Run:
    team = Team()
    team.add("ops", replies, toolboxes=(tools.box,), decider=decider, **options)
    run = Run.start(team.spawn("ops"), [Message.text("user", Role.USER, "go")])
    await run.until_done()
    return run


@pytest.mark.parametrize("pattern", ["deploy", "dep*", "group:release", "toolbox:ops"])
async def test_a_gated_call_asks_before_it_runs_and_runs_once_approved(pattern: str) -> None:
    tools, decider = Recorder(), Decider(Verdict.approve(by="alice"))
    run = await run_to_end(tools, decider, [call("deploy", {"env": "prod"}), "done"],
                           approval=ApprovalPolicy([pattern]))
    assert [a.tool for a in decider.asked] == ["deploy"]
    assert json.loads(decider.asked[0].arguments) == {"env": "prod"}
    assert tools.ran == [{"env": "prod"}]
    assert results(run)[0].content == "deployed"


async def test_a_tool_outside_the_patterns_runs_without_asking() -> None:
    tools, decider = Recorder(), Decider()
    await run_to_end(tools, decider, [call("look"), "done"], approval=ApprovalPolicy(["deploy"]))
    assert decider.asked == []


async def test_a_tool_marked_approval_is_gated_without_an_approval_policy() -> None:
    tools, decider = Recorder(), Decider(Verdict.reject("no", by="bob"))
    tools.box.get("deploy").approval = True  # type: ignore[union-attr]
    run = await run_to_end(tools, decider, [call("deploy"), "done"])
    assert len(decider.asked) == 1 and tools.ran == []
    assert results(run)[0].is_error


async def test_a_rejected_call_never_runs_and_the_model_reads_the_reason() -> None:
    tools, decider = Recorder(), Decider(Verdict.reject("not on Fridays", by="bob"))
    run = await run_to_end(tools, decider, [call("deploy"), "done"], approval=ApprovalPolicy(["deploy"]))
    assert tools.ran == []
    result = results(run)[0]
    assert (result.content, result.is_error) == ("deploy: rejected: not on Fridays", True)


async def test_an_approval_with_edited_arguments_runs_with_them_and_says_so() -> None:
    tools = Recorder()
    decider = Decider(Verdict.approve(arguments='{"env": "staging"}', by="carol"))
    run = await run_to_end(tools, decider, [call("deploy", {"env": "prod"}), "done"],
                           approval=ApprovalPolicy(["deploy"]))
    assert tools.ran == [{"env": "staging"}]
    assert results(run)[0].content.endswith("deployed")
    assert "edited arguments" in results(run)[0].content


async def test_ungated_calls_of_the_same_reply_run_and_results_keep_call_order() -> None:
    tools, decider = Recorder(), Decider(Verdict.reject("", by="bob"))
    run = await run_to_end(tools, decider, [calls(("look", {}), ("deploy", {}), ("look", {})), "done"],
                           approval=ApprovalPolicy(["deploy"]))
    assert [r.content for r in results(run)] == ["looked", "deploy: rejected: the user rejected this call",
                                                 "looked"]


async def test_a_gated_call_nobody_can_approve_is_rejected_saying_so() -> None:
    tools = Recorder()
    run = await run_to_end(tools, None, [call("deploy"), "done"], approval=ApprovalPolicy(["deploy"]))
    assert tools.ran == []
    assert results(run)[0].content.startswith("deploy: rejected: nobody can approve")


async def test_on_a_worker_the_approval_suspends_the_run_and_the_verdict_is_delivered_later() -> None:
    tools = Recorder()
    team = Team()
    team.add("ops", [call("deploy", {"env": "prod"}), "done"], toolboxes=(tools.box,),
             decider=Responder(SuspendingAnswerer()), approval=ApprovalPolicy(["deploy"], timeout=60))
    run = Run.start(team.spawn("ops"), [Message.text("user", Role.USER, "go")])
    assert isinstance(await run.step(), Suspended)
    [(call_id, payload)] = run.state.awaiting.items()
    assert (payload["kind"], payload["tool"], payload["timeout"]) == (APPROVAL, "deploy", 60)
    assert tools.ran == []

    restored = Run.restore(team.spawn("ops"), run.snapshot())  # another worker, after the verdict
    assert restored.deliver_decision(call_id, Verdict.approve(by="alice"))
    await restored.until_done()
    assert tools.ran == [{"env": "prod"}]
    assert results(restored)[0].content == "deployed"


async def test_an_approved_call_that_started_before_a_crash_is_not_run_again() -> None:
    tools = Recorder()
    team = Team()
    team.add("ops", [call("deploy"), "done"], toolboxes=(tools.box,), decider=Responder(SuspendingAnswerer()),
             approval=ApprovalPolicy(["deploy"]))
    run = Run.start(team.spawn("ops"), [Message.text("user", Role.USER, "go")])
    await run.step()
    [call_id] = run.state.awaiting
    run.deliver_decision(call_id, Verdict.approve(by="alice"))
    crashed = run.snapshot()
    crashed.started = [call_id]  # journaled as started, then the worker died before the result

    again = Run.restore(team.spawn("ops"), crashed)
    await again.until_done()
    assert tools.ran == []
    assert results(again)[0].content == "tool outcome unknown: the worker running it stopped"


async def test_the_tool_policy_comes_first_a_hidden_tool_is_never_gated() -> None:
    from shelly_dist.tools.policy import ToolPolicy

    tools, decider = Recorder(), Decider()
    run = await run_to_end(tools, decider, [call("deploy"), "done"], approval=ApprovalPolicy(["deploy"]),
                           tool_policy=ToolPolicy(deny=["deploy"]))
    assert decider.asked == []
    assert results(run)[0].content == "tool not found: deploy"
