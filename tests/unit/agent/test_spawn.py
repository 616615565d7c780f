"""``spawn``, ``spawn_status`` and ``spawn_cancel`` embedded: children run while the parent works,
and their outcomes are announced before the parent's next model call."""

from __future__ import annotations

import asyncio
import json

from shelly_dist import Message, Role
from shelly_dist.agent import Run
from shelly_dist.events import RUN_SPAWNED, Event
from shelly_dist.runtime.local import InlineDelegator
from shelly_dist.tools import Tool, ToolBox
from shelly_dist.tools.policy import ToolPolicy

from .helpers import Team, call, calls, delegate


def spawns(*tasks: str, agent: str = "worker", **extra: object) -> dict:
    return calls(*[("spawn", {"agent": agent, "task": t, **extra}) for t in tasks])


def announcements(agent) -> list[str]:
    return [m.text_content() for m in agent.chat.messages()
            if m.role == Role.USER and m.text_content().startswith("[Spawn result")]


def tool_results(agent) -> list[dict]:
    return [json.loads(m.tool_results()[0].content) for m in agent.chat.messages()
            if m.role == Role.TOOL and m.tool_results()[0].content.startswith(("{", "["))]


def gate(delegator: InlineDelegator, parent: str, n: int) -> ToolBox:
    """A ``work`` tool that keeps the parent busy until ``n`` of its spawned children ended."""

    async def work(arguments: str) -> str:
        async with asyncio.timeout(10):
            while len(await delegator.spawner.announcements(parent, 0)) < n:  # noqa: ASYNC110 (a condition, bounded)
                await asyncio.sleep(0.01)
        return "worked"

    return ToolBox([Tool("work", "keep working", {"type": "object"}, work)], name="work")


async def run_parent(team: Team, delegator: InlineDelegator, task: str = "go") -> object:
    agent = team.spawn("lead")
    run = Run.start(agent, [Message.text("user", Role.USER, task)], run_id="p1", delegator=delegator)
    await agent.execute(run)
    await delegator.spawner.settle(cancel=False)
    return agent


async def test_three_spawned_children_are_announced_before_the_parents_next_model_call():
    team, delegator = Team(), InlineDelegator()
    team.add("lead", [spawns("a", "b", "c"), call("work"), "all three heard"],
             max_delegation_depth=1, toolboxes=(gate(delegator, "p1", 3),))
    team.add("worker", ["found {task}"])
    lead = await run_parent(team, delegator)
    acks = tool_results(lead)[:3]
    assert [a["status"] for a in acks] == ["accepted"] * 3
    heard = announcements(lead)
    assert len(heard) == 3
    assert heard[0].startswith(f'[Spawn result from agent "worker" (run: {acks[0]["run_id"]})]\n'
                               f'[Subagent "worker" completed in ')
    assert heard[0].endswith("(1 iterations)]:\nfound a")
    third_call = team.requests("lead")[2].messages
    assert sum(m.text_content().startswith("[Spawn result") for m in third_call) == 3


async def test_a_parent_that_would_finish_waits_for_its_spawned_child_and_takes_another_step():
    team, delegator = Team(), InlineDelegator()
    team.add("lead", [spawns("slow"), "I will wait", "heard it"], max_delegation_depth=1)
    team.add("worker", [{"text": "done slowly", "delay": 0.2}])
    lead = await run_parent(team, delegator)
    assert lead.chat.messages()[-1].text_content() == "heard it"
    assert len(announcements(lead)) == 1


async def test_a_detached_child_does_not_keep_its_parent_from_finishing():
    team, delegator = Team(), InlineDelegator()
    team.add("lead", [spawns("bg", detach=True), "finished"], max_delegation_depth=1)
    team.add("worker", [{"text": "later", "delay": 0.2}])
    lead = await run_parent(team, delegator)
    assert lead.chat.messages()[-1].text_content() == "finished"
    assert announcements(lead) == []
    assert [s.state for s in await delegator.spawner.spawned("p1")] == ["completed"]  # the tree still ran it


async def test_max_children_rejects_the_sixth_spawn_without_waiting():
    team, delegator = Team(), InlineDelegator()
    team.add("lead", [spawns(*"abcdef"), call("work"), "ok"], max_delegation_depth=1,
             toolboxes=(gate(delegator, "p1", 5),))
    team.add("worker", ["done {task}"])
    lead = await run_parent(team, delegator)
    acks = tool_results(lead)[:6]
    assert [a["status"] for a in acks] == ["accepted"] * 5 + ["rejected"]
    assert acks[5]["error"] == "spawn: max_children 5 reached (5 running)"


async def test_the_same_dedup_key_twice_starts_one_run():
    team, delegator = Team(), InlineDelegator()
    team.add("lead", [calls(("spawn", {"agent": "worker", "task": "one", "dedup_key": "k"}),
                            ("spawn", {"agent": "worker", "task": "two", "dedup_key": "k"})), "ok", "ok"],
             max_delegation_depth=1)
    team.add("worker", ["done {task}"])
    lead = await run_parent(team, delegator)
    first, second = tool_results(lead)[:2]
    assert first["run_id"] == second["run_id"] and second["status"] == "accepted"
    assert len(await delegator.spawner.spawned("p1")) == 1
    assert len(team.requests("worker")) == 1


async def test_a_spawn_timeout_announces_a_failure():
    team, delegator = Team(), InlineDelegator()
    team.add("lead", [spawns("stuck"), "waiting", "heard"], max_delegation_depth=1, spawn_timeout=0.1)
    team.add("worker", [{"text": "never", "delay": 5}])
    lead = await run_parent(team, delegator)
    (heard,) = announcements(lead)
    assert '[Subagent "worker" failed after ' in heard and heard.endswith(": spawn: timed out after 0.1s]")


async def test_a_cancelled_spawned_run_is_announced_as_cancelled():
    team, delegator = Team(), InlineDelegator()

    async def cancel_it(arguments: str) -> str:
        (child,) = await delegator.spawner.spawned("p1")
        return str(await delegator.spawner.cancel("p1", child.run_id))

    box = ToolBox([Tool("stop_it", "", {"type": "object"}, cancel_it)], name="stop")
    team.add("lead", [spawns("long"), call("stop_it"), "heard"], max_delegation_depth=1, toolboxes=(box,))
    team.add("worker", [{"text": "never", "delay": 5}])
    lead = await run_parent(team, delegator)
    (heard,) = announcements(lead)
    assert heard.endswith(": canceled]")
    assert [s.state for s in await delegator.spawner.spawned("p1")] == ["canceled"]


async def test_spawn_cancel_of_a_run_it_did_not_spawn_is_an_error():
    team, delegator = Team(), InlineDelegator()
    team.add("lead", [call("spawn_cancel", {"run_id": "nope"}), "ok"], max_delegation_depth=1)
    lead = await run_parent(team, delegator)
    result = [m.tool_results()[0] for m in lead.chat.messages() if m.role == Role.TOOL][0]
    assert result.is_error and result.content == 'spawn_cancel: run "nope" was not spawned by this agent or has ended'


async def test_self_spawn_and_depth_are_rejected_as_delegate_rejects_them():
    team, delegator = Team(), InlineDelegator()
    team.add("lead", [calls(("spawn", {"agent": "lead", "task": "me"}), ("spawn", {"agent": "ghost", "task": "x"})),
                      "ok"], max_delegation_depth=1)
    lead = await run_parent(team, delegator)
    self_ack, ghost_ack = tool_results(lead)
    assert self_ack == {"run_id": "", "status": "rejected", "error": "spawn: self-delegation is not allowed"}
    assert ghost_ack["error"] == 'spawn: agent "ghost" not found'


async def test_a_leaf_agent_has_no_spawn_tools():
    team, delegator = Team(), InlineDelegator()
    team.add("lead", ["hi"], max_delegation_depth=0)
    await run_parent(team, delegator)
    offered = team.requests("lead")[0].tool_names
    assert "spawn" not in offered


def test_group_comms_selects_the_spawn_tools():
    tools = [Tool(n, "", {"type": "object"}, lambda a: a, group="comms") for n in ("spawn", "spawn_status")]
    assert ToolPolicy(deny=["group:comms"]).apply(tools, 0) == []


async def test_a_delegated_child_stopped_by_a_failed_sibling_takes_its_spawned_runs_with_it():
    team, delegator = Team(), InlineDelegator()
    seen: list[Event] = []
    team.add("lead", [delegate({"agent": "quick", "task": "fail"}, {"agent": "slow", "task": "spawn"}), "noted"],
             max_delegation_depth=2, delegate_fail_fast=True, on_event=seen.append)
    team.add("quick", [{"error": "broken", "delay": 0.2}])
    team.add("slow", [spawns("long"), "waiting"], max_delegation_depth=3)
    team.add("worker", [{"text": "never", "delay": 5}])
    await run_parent(team, delegator)
    (spawned,) = [e for e in seen if e.kind == RUN_SPAWNED]
    assert [s.state for s in await delegator.spawner.spawned(spawned.run_id)] == ["canceled"]


async def test_a_run_that_spawned_nothing_never_asks_its_spawner():
    team, delegator = Team(), InlineDelegator()
    asked: list[str] = []

    async def counted(parent_id: str, start: int) -> list:
        asked.append(parent_id)
        return []

    delegator.spawner.announcements = counted  # type: ignore[method-assign]
    team.add("lead", [call("list_agents"), "done"], max_delegation_depth=1)
    await run_parent(team, delegator)
    assert asked == []


async def test_a_parent_rebuilt_from_a_checkpoint_before_its_drain_hears_each_announcement_once():
    """The cursor is journaled with the messages it drained: a parent continued from the
    checkpoint before the drain drains again, one continued from after it does not."""
    team, delegator = Team(), InlineDelegator()
    team.add("lead", [spawns("a", "b"), call("work"), "heard"], max_delegation_depth=1,
             toolboxes=(gate(delegator, "p1", 2),), repeat_last=True)
    team.add("worker", ["found {task}"])
    snapshots: list[tuple[str, object]] = []

    async def keep(run: Run, reason: str) -> None:
        snapshots.append((reason, run.snapshot()))

    agent = team.spawn("lead")
    run = Run.start(agent, [Message.text("user", Role.USER, "go")], run_id="p1", delegator=delegator,
                    checkpoint=keep)
    await agent.execute(run)
    before = next(s for r, s in reversed(snapshots) if r == "tools")  # after `work`, before the last drain
    after = snapshots[-1][1]  # the final reply's checkpoint: the drained announcements are in it
    for snapshot, expected in ((before, 2), (after, 2)):
        again = Run.restore(team.spawn("lead"), snapshot, delegator=delegator)  # type: ignore[arg-type]
        again.reopen()
        await again.step()
        assert len(announcements(again.agent)) == expected
