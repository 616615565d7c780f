"""Shelly's ``handoff`` embedded (behaviours 47–49): the tool's input errors and duplicate call,
the chain limit, self-handoff, an unknown target, ``<handoff_context>``, the task re-claimed by
the peer and the peer's result as the delegation's result."""

from __future__ import annotations

import json
from typing import Any

from shelly_dist import Role
from shelly_dist.chats import Message
from shelly_dist.events import Event
from shelly_dist.runtime.local import LocalRuntime

from .helpers import Team, call, calls, complete, delegate
from .test_delegate_board import FakeBoard


def handoff(target: str, reason: str = "needs coding", context: str = "plan ready") -> dict[str, Any]:
    return call("handoff", {"target_agent": target, "reason": reason, "context": context})


def output(agent) -> list[dict]:
    return json.loads(next(m for m in agent.chat.messages() if m.role == Role.TOOL).tool_results()[0].content)


def lead(team: Team, *tasks: dict[str, Any], **options: Any):
    team.add("lead", [delegate(*tasks), "ok"], max_delegation_depth=1, **options)
    return team.spawn("lead")


async def test_handoff_input_fields_are_required_and_a_second_call_is_ignored():
    team = Team()
    team.add("planner", [call("handoff", {"target_agent": "coder", "reason": "r"}),
                         calls(("handoff", {"target_agent": "coder", "reason": "r", "context": "c"}),
                               ("handoff", {"target_agent": "other", "reason": "r", "context": "c"}))],
             max_handoffs=3)
    team.add("coder", [complete("coded it")])
    a = lead(team, {"agent": "planner", "task": "code it"})
    seen: list[Event] = []
    a.options.on_event = seen.append
    await a.run("go")
    planner_tools = [e.data["text"] for e in seen
                     if e.kind == "message_added" and e.data["role"] == "tool" and e.agent.startswith("planner-")]
    assert planner_tools == ["handoff: context is required", "Handing off to coder.",
                             "Handoff already initiated — duplicate call ignored."]
    assert output(a)[0]["result"] == "coded it"  # the first valid call won: coder, not "other"


async def test_successful_handoff_gives_the_peers_completion_and_claims_the_task_twice():
    board, team = FakeBoard(), Team()
    team.add("planner", [handoff("coder")], max_handoffs=3)
    team.add("coder", [complete("coded it")])
    a = lead(team, {"agent": "planner", "task": "code it", "context": "ctx", "task_id": "task-ho"}, max_handoffs=3)
    a.options.task_board = board
    await a.run("go")
    (entry,) = output(a)
    assert entry["agent"] == "planner"
    assert entry["completion"] == {"status": "completed", "summary": "coded it"}
    assert entry["result"] == "coded it"
    assert [c[0] for c in board.claims] == ["task-ho", "task-ho"]
    assert board.claims[0][1].startswith("planner-") and board.claims[1][1].startswith("coder-")
    assert board.updates == [("task-ho", "completed")]


async def test_the_peer_opens_with_the_handoff_context_then_the_original_task():
    team = Team()
    team.add("planner", [handoff("coder", "needs coding", "plan ready")], max_handoffs=3)
    team.add("coder", [complete("coded it")])
    await lead(team, {"agent": "planner", "task": "code it", "context": "ctx"}).run("go")
    users = [m.text_content() for m in team.requests("coder")[0].messages if m.role == Role.USER]
    assert users == ['<handoff_context>\nThis task was handed off to you by agent "planner".\nReason: needs coding'
                     "\n\nplan ready\n</handoff_context>", "code it"]


async def test_agents_that_keep_handing_off_hit_the_chain_limit():
    team = Team()
    team.add("ping", [handoff("pong")], max_handoffs=5)
    team.add("pong", [handoff("ping")], max_handoffs=5)
    a = lead(team, {"agent": "ping", "task": "bounce"}, max_handoffs=2)
    await a.run("go")
    (entry,) = output(a)
    assert entry["error"] == 'handoff chain limit (2) reached — cannot hand off to "pong"'


async def test_the_chain_limit_is_three_when_the_delegating_agent_sets_none():
    team = Team()
    team.add("ping", [handoff("pong")], max_handoffs=5)
    team.add("pong", [handoff("ping")], max_handoffs=5)
    a = lead(team, {"agent": "ping", "task": "bounce"})
    await a.run("go")
    assert output(a)[0]["error"] == 'handoff chain limit (3) reached — cannot hand off to "ping"'
    assert len(team.requests("ping")) + len(team.requests("pong")) == 4


async def test_a_handoff_to_its_own_agent_is_rejected():
    board, team = FakeBoard(), Team()
    team.add("planner", [handoff("Planner")], max_handoffs=3)
    a = lead(team, {"agent": "planner", "task": "t", "task_id": "task-1"})
    a.options.task_board = board
    await a.run("go")
    assert output(a)[0]["error"] == 'self-handoff is not allowed: "planner" cannot hand off to itself'
    assert board.updates == [("task-1", "failed")]


async def test_a_handoff_to_an_unregistered_agent_is_an_entry_error():
    team = Team()
    team.add("planner", [handoff("ghost")], max_handoffs=3)
    a = lead(team, {"agent": "planner", "task": "t"})
    await a.run("go")
    assert output(a)[0]["error"] == 'handoff: agent "ghost" not found'


async def test_handoff_is_offered_only_to_a_child_whose_max_handoffs_is_above_zero():
    team = Team()
    team.add("planner", [complete("done")])
    team.add("coder", [complete("done")], max_handoffs=1)
    await lead(team, {"agent": "planner", "task": "a"}, {"agent": "coder", "task": "b"}).run("go")
    assert "handoff" not in team.requests("planner")[0].tool_names
    assert "handoff" in team.requests("coder")[0].tool_names
    assert "handoff" not in team.requests("lead")[0].tool_names


async def test_the_tree_usage_counts_every_agent_of_a_handoff_chain():
    team = Team()
    team.add("planner", [handoff("coder")], max_handoffs=3)
    team.add("coder", [complete("coded it")])
    a = lead(team, {"agent": "planner", "task": "code it"})
    outcome = await LocalRuntime().execute(a, [Message.text("user", Role.USER, "go")], session="s")
    assert outcome.usage.model_requests == 2  # the lead's own calls
    assert outcome.tree_usage is not None and outcome.tree_usage.model_requests == 4  # + planner + coder
