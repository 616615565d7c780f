"""People in the loop behave the same embedded and on the pool (issue 35): a gated tool call waits
for ``Session.approve``/``reject`` (listed by ``Session.decisions`` with its tool, arguments and
path), a timeout rejects it, and ``Session.steer`` reaches a busy child's next model call and not
the one in flight."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from .support import Cluster, Scenario, both, cluster, complete, delegate

__all__ = ["cluster"]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

LEAD = {"name": "lead", "options": {"max_delegation_depth": 1}}
SET_ENV = {"tool_calls": [{"name": "shared_state_set", "arguments": {"key": "env", "value": "prod"}}]}
LISTED = ("id", "kind", "path", "tool", "arguments", "timeout")


def deployer(approval: dict[str, Any]) -> dict[str, Any]:
    """An agent whose blackboard writes a person approves (a built-in tool, gated by config)."""
    return {"name": "deployer", "toolboxes": ["state"], "approval": approval}


def gated(**approval: Any) -> Scenario:
    return Scenario(scripts={"lead": [delegate({"agent": "deployer", "task": "ship it"}), "lead heard: {result}"],
                             "deployer": [SET_ENV, complete("set said: {result}")]},
                    agents=[LEAD, deployer({"tools": ["shared_state_set"], **approval})])


async def the_approval(session: Any) -> dict[str, Any]:
    """The one open approval of ``session``, once listed (polled with a deadline)."""
    deadline = asyncio.get_running_loop().time() + 60
    while not (found := [d for d in await session.decisions() if d["kind"] == "approval"]):
        assert asyncio.get_running_loop().time() < deadline, "no approval was asked"
        await asyncio.sleep(0.05)  # polling the open decisions: the condition, with a deadline
    return {k: found[0][k] for k in LISTED} | {"agent": found[0]["agent"].split("-")[0]}


def approving(**how: Any) -> Any:
    async def during(session: Any, root: Path) -> dict[str, Any]:
        listed = await the_approval(session)
        await session.approve(listed["id"], **how)
        return listed

    return during


def rejecting(reason: str) -> Any:
    async def during(session: Any, root: Path) -> dict[str, Any]:
        listed = await the_approval(session)
        await session.reject(listed["id"], reason=reason)
        return listed

    return during


async def test_an_approved_call_runs_with_the_edited_arguments_on_both(cluster: Cluster) -> None:
    scenario = gated()
    scenario.during = approving(arguments='{"key": "env", "value": "staging"}')
    observed = await both(cluster, scenario)
    assert observed.during == {"id": "a-1", "kind": "approval", "path": ["lead", "deployer-ship-1"],
                               "tool": "shared_state_set", "arguments": {"key": "env", "value": "prod"},
                               "timeout": 0.0, "agent": "deployer"}
    result = observed.entries[0][0]["result"]
    assert result.startswith("set said: [the user approved this call with edited arguments:")
    assert '"value": "staging"' in result
    kinds = [k for k, _, _ in observed.people]
    assert kinds == ["approval_requested", "approval_decided"]
    assert observed.people[0][2]["path"] == ["lead", "deployer-ship-1"]


async def test_a_rejected_calls_reason_reaches_the_model_on_both(cluster: Cluster) -> None:
    scenario = gated()
    scenario.during = rejecting("not on Fridays")
    observed = await both(cluster, scenario)
    assert observed.entries[0][0]["result"] == "set said: shared_state_set: rejected: not on Fridays"
    assert observed.people[1][2]["decision"] == "reject"


async def test_an_approval_nobody_gives_in_time_is_rejected_on_both(cluster: Cluster) -> None:
    observed = await both(cluster, gated(timeout="1s"))
    assert observed.entries[0][0]["result"] == "set said: shared_state_set: rejected: approval timed out"
    assert observed.people[1][2] | {"by": "timeout"} == observed.people[1][2]


async def test_steer_reaches_the_busy_childs_next_model_call_and_not_the_one_in_flight_on_both(
        cluster: Cluster) -> None:
    mark, go = cluster.root / "calling", cluster.root / "go"
    first = {"tool_calls": [{"name": "shared_state_set", "arguments": {"key": "first_saw", "value": "{task}"}}],
             "mark": str(mark), "until": str(go)}
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "busy", "task": "watch the weather"}), "lead heard: {result}"],
                 "busy": [first, complete("then saw: {task}")]},
        agents=[LEAD, {"name": "busy", "toolboxes": ["state"]}])

    async def during(session: Any, root: Path) -> str:
        for f in (mark, go):
            f.unlink(missing_ok=True)
        deadline = asyncio.get_running_loop().time() + 60
        while not mark.exists():  # the busy child's model call is in flight
            assert asyncio.get_running_loop().time() < deadline, "the busy child never called its model"
            await asyncio.sleep(0.05)  # polling for the call: the condition, with a deadline
        await session.steer("use the blue one", agent="busy")
        go.touch()
        seen = await session.engine.stores.store(session.id).watch("first_saw", timeout=60)
        return seen.value  # what the call in flight saw: its tool call wrote it

    scenario.during = during
    observed = await both(cluster, scenario)
    assert observed.entries[0][0]["result"] == "then saw: use the blue one"
    steered = [(k, data) for k, _, data in observed.people]
    assert steered == [("steered", {"text": "use the blue one", "interrupt": False, "by": "python"})]
    assert observed.during == "watch the weather"  # the call in flight saw the task, not the message


async def test_steer_interrupt_skips_the_calls_of_the_reply_in_flight_on_both(cluster: Cluster) -> None:
    mark, go = cluster.root / "calling", cluster.root / "go"
    first = {"tool_calls": [{"name": "shared_state_set", "arguments": {"key": "first", "value": "x"}},
                            {"name": "shared_state_set", "arguments": {"key": "second", "value": "y"}}],
             "mark": str(mark), "until": str(go)}
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "busy", "task": "watch the weather"}), "lead heard: {result}"],
                 "busy": [first, complete("{result} | {task}")]},
        agents=[LEAD, {"name": "busy", "toolboxes": ["state"]}])

    async def during(session: Any, root: Path) -> list[str]:
        for f in (mark, go):
            f.unlink(missing_ok=True)
        deadline = asyncio.get_running_loop().time() + 60
        while not mark.exists():
            assert asyncio.get_running_loop().time() < deadline, "the busy child never called its model"
            await asyncio.sleep(0.05)  # polling for the call: the condition, with a deadline
        await session.steer("stop: wrong city", agent="busy", interrupt=True)
        go.touch()
        return []

    scenario.during = during
    observed = await both(cluster, scenario)
    assert observed.entries[0][0]["result"] == "skipped: the user interrupted | stop: wrong city"
    assert observed.people == [("steered", "busy-watch-1",
                                {"text": "stop: wrong city", "interrupt": True, "by": "python"})]
