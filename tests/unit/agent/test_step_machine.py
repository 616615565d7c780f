"""The run as a resumable step machine: suspend at a delegation, serialise, rebuild, resume."""

from __future__ import annotations

import json

import pytest

from shelly_dist import Message, Role, Tool, ToolBox
from shelly_dist.agent import Finished, Phase, Run, RunState, Suspended, child_messages, entry_from_outcome
from shelly_dist.agent.run import OUTCOME_UNKNOWN
from shelly_dist.errors import UsageError

from .helpers import Team, call, calls, complete, delegate


class WorkerDied(Exception):
    """Stands for a worker process killed between two checkpoints."""


def build_team() -> Team:
    team = Team()
    team.add(
        "orchestrator",
        [
            delegate({"agent": "worker", "task": "research alpha", "context": "part one"},
                     {"agent": "worker", "task": "research beta"}),
            "Summary: both parts done.",
        ],
        max_delegation_depth=1,
    )
    team.add("worker", [complete("finished {task}")])
    return team


async def run_child(team: Team, request) -> object:
    """Run one child to its end outside any runtime, as a remote worker would."""
    child = team.registry.spawn(request.agent, request.depth)
    child.name = f"{request.agent}-{request.index}"
    run = Run.start(child, child_messages(request), visited=request.visited)
    reply = await run.until_done()
    return entry_from_outcome(request.agent, reply=reply, completion=run.state.completion)


async def test_suspended_run_survives_json_and_gives_the_same_answer_and_history():
    uninterrupted = build_team().spawn("orchestrator")
    expected_reply = await uninterrupted.run("Research alpha and beta")
    expected_history = [m.model_dump() for m in uninterrupted.chat.messages()]

    team = build_team()
    agent = team.spawn("orchestrator")
    run = Run.start(agent, [Message.text("user", Role.USER, "Research alpha and beta")])
    outcome = await run.step()
    assert isinstance(outcome, Suspended) and len(outcome.requests) == 2
    state_json = run.snapshot().model_dump_json()
    requests_json = json.dumps([r.model_dump() for r in outcome.requests])
    del team, agent, run, outcome

    team = build_team()
    state = RunState.model_validate_json(state_json)
    assert state.phase == Phase.SUSPENDED
    resumed = Run.rebuild(team.registry, state)
    from shelly_dist.agent import ChildRequest

    for raw in reversed(json.loads(requests_json)):  # deliver out of order on purpose
        request = ChildRequest.model_validate(raw)
        resumed.deliver(request.key, await run_child(team, request))
    reply = await resumed.until_done()

    assert reply.model_dump() == expected_reply.model_dump()
    assert [m.model_dump() for m in resumed.agent.chat.messages()] == expected_history


async def test_stepping_a_suspended_run_before_every_child_is_delivered_is_an_error():
    team = build_team()
    run = Run.start(team.spawn("orchestrator"), [Message.text("user", Role.USER, "go")])
    outcome = await run.step()
    assert isinstance(outcome, Suspended)
    run.deliver(outcome.requests[0].key, await run_child(team, outcome.requests[0]))
    with pytest.raises(UsageError, match="still waiting on 1 children"):
        await run.step()


async def test_second_delivery_of_the_same_child_is_ignored():
    team = build_team()
    run = Run.start(team.spawn("orchestrator"), [Message.text("user", Role.USER, "go")])
    outcome = await run.step()
    first = outcome.requests[0]
    entry = await run_child(team, first)
    assert run.deliver(first.key, entry) is False
    other = entry.model_copy(update={"result": "impostor"})
    run.deliver(first.key, other)
    assert run.state.pending[0].entries[0].result == entry.result


async def test_restored_run_with_a_journaled_reply_does_not_call_the_model_again():
    ran: list[str] = []

    async def work(arguments: str) -> str:
        ran.append(arguments)
        return "worked"

    team = Team()
    box = ToolBox([Tool("work", "", {"type": "object"}, work)])
    team.add("solo", [call("work", {"n": 1}), "done"], toolboxes=(box,))
    snapshots: list[RunState] = []

    async def checkpoint(run: Run, reason: str) -> None:
        if reason == "reply":
            snapshots.append(run.snapshot())
            raise WorkerDied  # the worker dies right after journaling the reply

    run = Run.start(team.spawn("solo"), [Message.text("user", Role.USER, "go")], checkpoint=checkpoint)
    with pytest.raises(WorkerDied):
        await run.step()
    assert ran == []

    resumed = Run.rebuild(team.registry, snapshots[0])
    reply = await resumed.until_done()
    assert reply.text_content() == "done"
    assert len(ran) == 1
    assert sum(c.calls for c in team.completers["solo"]) == 2  # once before the crash, once after


async def test_restored_run_does_not_rerun_a_tool_whose_result_is_journaled():
    ran: list[str] = []

    async def work(arguments: str) -> str:
        ran.append(json.loads(arguments)["n"])
        return f"worked {len(ran)}"

    team = Team()
    box = ToolBox([Tool("work", "", {"type": "object"}, work, retry_on_crash=True)])
    team.add("solo", [calls(("work", {"n": "a"}), ("work", {"n": "b"})), "done"], toolboxes=(box,))
    snapshots: list[RunState] = []

    async def checkpoint(run: Run, reason: str) -> None:
        if reason == "tool" and not snapshots:
            snapshots.append(run.snapshot())

    run = Run.start(team.spawn("solo"), [Message.text("user", Role.USER, "go")], checkpoint=checkpoint)
    await run.until_done()
    assert ran == ["a", "b"]
    assert len(snapshots[0].tool_results) == 1

    ran.clear()
    resumed = Run.rebuild(team.registry, snapshots[0])
    await resumed.until_done()
    assert len(ran) == 1  # only the call without a journaled result ran again


async def test_child_run_finishes_with_its_completion():
    team = Team()
    team.add("worker", [complete("all good")])
    child = team.spawn("worker", depth=1)
    run = Run.start(child, [Message.text("user", Role.USER, "task")])
    outcome = await run.step()
    assert isinstance(outcome, Finished)
    assert outcome.completion is not None and outcome.completion.summary == "all good"


def _crash_mid_tools(retry_on_crash: bool) -> tuple[Team, list[str]]:
    """A team whose one tool call is journaled as started, then the worker dies while it runs."""
    ran: list[str] = []

    async def work(arguments: str) -> str:
        ran.append(arguments)
        return "worked"

    team = Team()
    box = ToolBox([Tool("work", "", {"type": "object"}, work, retry_on_crash=retry_on_crash)])
    team.add("solo", [calls(("work", {"n": "a"})), "done"], toolboxes=(box,))
    return team, ran


async def _snapshot_when_tool_runs(team: Team, ran: list[str]) -> RunState:
    snapshot: list[RunState] = []

    async def checkpoint(run: Run, reason: str) -> None:
        snapshot.append(run.snapshot())

    run = Run.start(team.spawn("solo"), [Message.text("user", Role.USER, "go")], checkpoint=checkpoint)
    await run.until_done()
    ran.clear()
    # The last journaled state before the tool's result: the worker died while the tool ran.
    return next(s for s in reversed(snapshot) if not s.tool_results and s.phase == Phase.TOOLS)


async def test_tool_that_started_and_never_finished_gets_outcome_unknown_instead_of_running_again():
    team, ran = _crash_mid_tools(retry_on_crash=False)
    state = await _snapshot_when_tool_runs(team, ran)
    assert state.started, "the call must be journaled as started before the tool runs"
    resumed = Run.rebuild(team.registry, state)
    await resumed.until_done()
    assert ran == []
    results = [p for m in resumed.agent.chat.messages() if m.role == Role.TOOL for p in m.parts]
    assert [(r.content, r.is_error) for r in results] == [(OUTCOME_UNKNOWN, True)]
    assert OUTCOME_UNKNOWN == "tool outcome unknown: the worker running it stopped"


async def test_retry_safe_tool_that_started_and_never_finished_runs_again():
    team, ran = _crash_mid_tools(retry_on_crash=True)
    state = await _snapshot_when_tool_runs(team, ran)
    resumed = Run.rebuild(team.registry, state)
    await resumed.until_done()
    assert len(ran) == 1


async def test_finished_run_whose_finish_was_lost_finishes_again_with_its_journaled_reply():
    team = Team()
    team.add("solo", ["the answer"])
    snapshots: list[RunState] = []

    async def checkpoint(run: Run, reason: str) -> None:
        snapshots.append(run.snapshot())

    run = Run.start(team.spawn("solo"), [Message.text("user", Role.USER, "go")], checkpoint=checkpoint)
    await run.until_done()
    resumed = Run.rebuild(team.registry, snapshots[-1])
    outcome = await resumed.step()
    assert isinstance(outcome, Finished) and outcome.reply.text_content() == "the answer"
    assert sum(c.calls for c in team.completers["solo"]) == 1
