"""list_agents, delegate and task_complete (SHELLY_BEHAVIOURS §1.6.5, behaviours 24–46)."""

from __future__ import annotations

import asyncio
import json

import pytest

from shelly_dist import Message, Role
from shelly_dist.agent import Run
from shelly_dist.agent.delegation import CONTEXT_LIMIT, plan_children
from shelly_dist.errors import DelegationRejected
from shelly_dist.events import DELEGATION_PROGRESS, MESSAGE_ADDED, Event

from .helpers import Team, call, complete, delegate, echo_toolbox


def tool_results(agent) -> list[str]:
    return [m.tool_results()[0].content for m in agent.chat.messages() if m.role == Role.TOOL]


def delegate_output(agent) -> list[dict]:
    return json.loads(tool_results(agent)[0])


async def test_list_agents_leaves_out_self_case_insensitively_by_config_name():
    team = Team()
    team.add("Self", [call("list_agents"), "ok"], max_delegation_depth=1)
    team.add("coder", ["x"], description="writes code")
    team.registry.register("self", "lowercase twin", lambda: None)  # same name, other case
    agent = team.spawn("Self")
    agent.name = "Self-refactor-1"
    await agent.run("who is there")
    names = [e["name"] for e in json.loads(tool_results(agent)[0])]
    assert names == ["coder"]


async def test_list_agents_entries_keep_skills_cost_and_concurrency_and_omit_empty_fields():
    team = Team()
    team.add("lead", [call("list_agents"), "ok"], max_delegation_depth=1)
    team.registry.register("full", "d", lambda: None, skills=["a", "b"], estimated_cost="cheap", max_concurrency=2)
    team.registry.register("bare", "", lambda: None)
    agent = team.spawn("lead")
    await agent.run("list")
    entries = {e["name"]: e for e in json.loads(tool_results(agent)[0])}
    assert entries["full"] == {
        "name": "full", "description": "d", "skills": ["a", "b"], "estimated_cost": "cheap", "max_concurrency": 2,
    }
    assert entries["bare"] == {"name": "bare"}


async def test_list_agents_outputs_null_when_self_is_the_only_agent():
    team = Team()
    team.add("alone", [call("list_agents"), "ok"], max_delegation_depth=1)
    agent = team.spawn("alone")
    await agent.run("list")
    assert tool_results(agent)[0] == "null"


async def test_delegate_with_invalid_json_is_an_invalid_input_error():
    team = Team()
    team.add("lead", [{"tool_calls": [{"name": "delegate", "arguments": "{not json"}]}, "ok"], max_delegation_depth=1)
    agent = team.spawn("lead")
    await agent.run("go")
    result = next(m for m in agent.chat.messages() if m.role == Role.TOOL).tool_results()[0]
    assert result.is_error and "invalid input" in result.content


async def test_delegate_to_self_is_rejected_case_insensitively_by_config_name():
    team = Team()
    team.add("coder", [delegate({"agent": "CODER", "task": "again"}), "ok"], max_delegation_depth=2)
    agent = team.spawn("coder")
    agent.name = "coder-refactor-1"
    await agent.run("go")
    result = next(m for m in agent.chat.messages() if m.role == Role.TOOL).tool_results()[0]
    assert result.is_error and result.content == "delegate: self-delegation is not allowed"


def test_delegate_at_max_depth_is_rejected_including_max_zero():
    for depth, max_depth in ((0, 0), (1, 1), (3, 2)):
        with pytest.raises(DelegationRejected, match=f"max delegation depth {max_depth} reached"):
            plan_children(
                call_id="c", arguments='{"tasks":[{"agent":"w","task":"t","context":""}]}', registry=None,
                config_name="lead", instance_name="lead", depth=depth, max_depth=max_depth, visited=[], run_id="r",
            )


async def test_delegation_tools_are_absent_at_max_depth():
    team = Team()
    team.add("leaf", [delegate({"agent": "other", "task": "t"}), "ok"], max_delegation_depth=1)
    team.add("other", ["x"])
    agent = team.spawn("leaf", depth=1)
    run = Run.start(agent, [Message.text("user", Role.USER, "go")])
    await run.step()
    assert "delegate" not in [t.name for t in run.tools]
    assert "<available_agents>" not in agent.chat.system_prompt()
    assert tool_results(agent)[0] == "tool not found: delegate"


async def test_delegate_with_no_tasks_returns_an_empty_array():
    team = Team()
    team.add("lead", [call("delegate", {"tasks": []}), "ok"], max_delegation_depth=1)
    agent = team.spawn("lead")
    await agent.run("go")
    assert tool_results(agent)[0] == "[]"


async def test_delegate_to_unknown_agent_gives_a_per_entry_error():
    team = Team()
    team.add("lead", [delegate({"agent": "ghost", "task": "boo"}), "ok"], max_delegation_depth=1)
    agent = team.spawn("lead")
    await agent.run("go")
    assert delegate_output(agent) == [{"agent": "ghost", "error": 'agent "ghost" not found'}]


async def test_two_tasks_return_results_in_input_order():
    team = Team()
    team.add("lead", [delegate({"agent": "a", "task": "first"}, {"agent": "b", "task": "second"}), "ok"],
             max_delegation_depth=1)
    team.add("a", [{"text": "from a", "delay": 0.05}])
    team.add("b", ["from b"])
    agent = team.spawn("lead")
    await agent.run("go")
    assert delegate_output(agent) == [{"agent": "a", "result": "from a"}, {"agent": "b", "result": "from b"}]


async def test_mixed_results_are_independent_and_nothing_is_cancelled():
    team = Team()
    team.add("lead", [delegate({"agent": "ok", "task": "t1"}, {"agent": "bad", "task": "t2"},
                               {"agent": "ghost", "task": "t3"}), "done"], max_delegation_depth=1)
    team.add("ok", [{"text": "fine", "delay": 0.05}])
    team.add("bad", [{"error": "boom"}])
    agent = team.spawn("lead")
    await agent.run("go")
    out = delegate_output(agent)
    assert out[0] == {"agent": "ok", "result": "fine"}
    assert "boom" in out[1]["error"]
    assert "not found" in out[2]["error"]


async def test_fail_fast_cancels_siblings_on_the_first_error():
    team = Team()
    team.add("lead", [delegate({"agent": "slow", "task": "t1"}, {"agent": "bad", "task": "t2"}), "done"],
             max_delegation_depth=1, delegate_fail_fast=True)
    team.add("slow", [{"text": "late", "delay": 30}])
    team.add("bad", [{"error": "boom"}])
    agent = team.spawn("lead")
    await asyncio.wait_for(agent.run("go"), 10)
    out = delegate_output(agent)
    assert out[0] == {"agent": "slow", "error": "canceled: sibling failed"}
    assert "boom" in out[1]["error"]


async def test_child_gets_the_registry_and_can_list_agents():
    team = Team()
    team.add("lead", [delegate({"agent": "mid", "task": "look around"}), "ok"], max_delegation_depth=2)
    team.add("mid", [call("list_agents"), complete("looked")], max_delegation_depth=2)
    team.add("third", ["x"])
    agent = team.spawn("lead")
    await agent.run("go")
    child_request = team.requests("mid")[1]
    listed = [m for m in child_request.messages if m.role == Role.TOOL][0].tool_results()[0].content
    assert {e["name"] for e in json.loads(listed)} == {"lead", "third"}


async def test_child_uses_only_its_own_toolboxes():
    team = Team()
    team.add("lead", [delegate({"agent": "child", "task": "use echo"}), "ok"], max_delegation_depth=1,
             toolboxes=(echo_toolbox(),))
    team.add("child", [call("echo", {"text": "hi"}), "finished anyway"])
    agent = team.spawn("lead")
    await agent.run("go")
    child_msgs = team.requests("child")[1].messages
    assert [m for m in child_msgs if m.role == Role.TOOL][0].tool_results()[0].content == "tool not found: echo"
    assert delegate_output(agent) == [{"agent": "child", "result": "finished anyway"}]


async def test_child_chat_is_context_then_task_and_task_alone_without_context():
    team = Team()
    team.add("lead", [delegate({"agent": "w", "task": "do A", "context": "background"},
                               {"agent": "w", "task": "do B"}), "ok"], max_delegation_depth=1)
    team.add("w", ["done"])
    agent = team.spawn("lead")
    await agent.run("go")
    users = sorted(
        ([m.text_content() for m in r.messages if m.role == Role.USER] for r in team.requests("w")), key=len
    )
    assert users == [["do B"], ["<delegation_context>\nbackground\n</delegation_context>", "do A"]]


async def test_long_context_is_cut_and_marked():
    team = Team()
    team.add("lead", [delegate({"agent": "w", "task": "t", "context": "c" * (CONTEXT_LIMIT + 5)}), "ok"],
             max_delegation_depth=1)
    team.add("w", ["done"])
    await team.spawn("lead").run("go")
    ctx = [m for m in team.requests("w")[0].messages if m.role == Role.USER][0].text_content()
    body = ctx.split("\n")[1]
    assert body == "c" * CONTEXT_LIMIT + "… [context truncated]"


async def test_task_complete_gives_the_entry_its_completion_and_summary_as_result():
    team = Team()
    team.add("lead", [delegate({"agent": "w", "task": "t"}), "ok"], max_delegation_depth=1)
    team.add("w", [complete("did it", files_modified=["a.go"])])
    agent = team.spawn("lead")
    await agent.run("go")
    assert delegate_output(agent) == [{
        "agent": "w", "result": "did it",
        "completion": {"status": "completed", "summary": "did it", "files_modified": ["a.go"]},
    }]


async def test_child_without_task_complete_gives_its_reply_as_result():
    team = Team()
    team.add("lead", [delegate({"agent": "w", "task": "t"}), "ok"], max_delegation_depth=1)
    team.add("w", ["plain reply"])
    agent = team.spawn("lead")
    await agent.run("go")
    assert delegate_output(agent) == [{"agent": "w", "result": "plain reply"}]


async def test_iteration_exhaustion_is_a_failed_completion_not_an_error():
    team = Team()
    team.add("lead", [delegate({"agent": "w", "task": "t"}), "ok"], max_delegation_depth=1)
    team.add("w", [call("nothing")], repeat_last=True, max_iterations=2)
    agent = team.spawn("lead")
    await agent.run("go")
    entry = delegate_output(agent)[0]
    assert "error" not in entry
    assert entry["completion"]["status"] == "failed"
    assert "exhausted" in entry["completion"]["summary"]
    assert "Iteration limit reached" in entry["completion"]["caveats"]


async def test_cycle_in_the_delegation_chain_is_a_per_entry_error():
    team = Team()
    team.add("a", [delegate({"agent": "b", "task": "pass it on"}), "ok"], max_delegation_depth=5)
    team.add("b", [delegate({"agent": "a", "task": "back to a"}), complete("b done")], max_delegation_depth=5)
    agent = team.spawn("a")
    await agent.run("go")
    b_tool = [m for m in team.requests("b")[1].messages if m.role == Role.TOOL][0].tool_results()[0].content
    assert json.loads(b_tool) == [{"agent": "a", "error": "cycle detected: a -> b -> a"}]


async def test_spawned_children_get_instance_names_config_slug_counter():
    team = Team()
    seen: list[str] = []
    team.add("lead", [delegate({"agent": "coder", "task": "Refactor the parser"},
                               {"agent": "coder", "task": "the fix"}), "ok"], max_delegation_depth=1)
    team.add("coder", ["done"])
    lead = team.spawn("lead")
    lead.options.on_event = lambda e: seen.append(e.agent) if e.kind == "run_started" else None
    await lead.run("go")
    assert sorted(seen) == ["coder-fix-2", "coder-refactor-1"]


async def test_max_concurrency_caps_simultaneous_instances_of_an_agent():
    running = 0
    peak = 0

    async def track(messages, tools):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0)  # yield: without the cap every sibling would be inside by now
        running -= 1
        return "done"

    from shelly_dist import Agent, AgentOptions, FunctionCompleter

    team = Team()
    team.add("lead", [delegate(*[{"agent": "w", "task": f"job {i}"} for i in range(6)]), "ok"],
             max_delegation_depth=1)
    team.registry.register("w", "worker", lambda: Agent("w", completer=FunctionCompleter(track),
                                                          options=AgentOptions()), max_concurrency=2)
    await team.spawn("lead").run("go")
    assert peak == 2


async def test_max_concurrency_counts_instances_within_a_session_not_across_sessions():
    from shelly_dist import Agent, AgentOptions, FunctionCompleter, Message, Role
    from shelly_dist.runtime.local import LocalRuntime

    inside = 0
    both = asyncio.Event()
    alone: list[str] = []

    async def track(messages, tools):
        nonlocal inside
        inside += 1
        if inside == 2:
            both.set()
        try:
            await asyncio.wait_for(both.wait(), 10)  # the other session's instance must be running too
        except TimeoutError:
            alone.append("ran alone")
        return "done"

    team = Team()
    team.add("lead", [delegate({"agent": "w", "task": "job"}), "ok"], max_delegation_depth=1)
    team.registry.register("w", "worker", lambda: Agent("w", completer=FunctionCompleter(track),
                                                          options=AgentOptions()), max_concurrency=1)
    runtime = LocalRuntime()
    go = [Message.text("user", Role.USER, "go")]
    await asyncio.gather(runtime.execute(team.spawn("lead"), go, session="a" * 16),
                         runtime.execute(team.spawn("lead"), list(go), session="b" * 16))
    assert alone == []


async def test_max_concurrency_slot_is_given_back_while_an_instance_waits_on_its_children():
    from shelly_dist import Agent, AgentOptions, FunctionCompleter

    inside = 0
    both = asyncio.Event()
    alone: list[str] = []

    async def leaf(messages, tools):
        nonlocal inside
        inside += 1
        if inside == 2:
            both.set()
        try:
            await asyncio.wait_for(both.wait(), 10)  # the other mid's leaf must be running too
        except TimeoutError:
            alone.append("ran alone")
        return "leaf done"

    team = Team()
    team.add("lead", [delegate({"agent": "mid", "task": "a"}, {"agent": "mid", "task": "b"}), "ok"],
             max_delegation_depth=2)
    team.add("mid", [delegate({"agent": "leaf", "task": "work"}), "mid done"], max_delegation_depth=2,
             max_concurrency=1)
    team.registry.register("leaf", "leaf", lambda: Agent("leaf", completer=FunctionCompleter(leaf),
                                                           options=AgentOptions()))
    await team.spawn("lead").run("go")
    assert alone == []


async def test_progress_events_report_child_text_and_the_final_result():
    got: list[Event] = []
    team = Team()
    team.add("lead", [delegate({"agent": "worker", "task": "report"}), "ok"], max_delegation_depth=1)
    team.add("worker", [{"text": "halfway there", "tool_calls": [{"name": "noop", "arguments": {}}]},
                        complete("the summary")])
    lead = team.spawn("lead")
    lead.options.on_event = got.append
    await lead.run("go")
    progress = [e.data for e in got if e.kind == DELEGATION_PROGRESS]
    assert progress[0]["kind"] == "progress" and progress[0]["message"] == "halfway there"
    assert progress[0]["parent"] == "lead" and progress[0]["agent"].startswith("worker-")
    assert progress[-1]["kind"] == "result" and progress[-1]["result"]["result"] == "the summary"
    assert any(e.kind == MESSAGE_ADDED and e.agent.startswith("worker-") for e in got)


async def test_failing_child_still_emits_one_result_event_with_its_error():
    got: list[Event] = []
    team = Team()
    team.add("lead", [delegate({"agent": "worker", "task": "fail"}), "ok"], max_delegation_depth=1)
    team.add("worker", [{"error": "kaput"}])
    lead = team.spawn("lead")
    lead.options.on_event = got.append
    await lead.run("go")
    results = [e.data for e in got if e.kind == DELEGATION_PROGRESS and e.data["kind"] == "result"]
    assert len(results) == 1 and "kaput" in results[0]["result"]["error"]


async def test_progress_text_over_500_characters_is_cut():
    got: list[Event] = []
    team = Team()
    team.add("lead", [delegate({"agent": "worker", "task": "talk"}), "ok"], max_delegation_depth=1)
    team.add("worker", ["y" * 600])
    lead = team.spawn("lead")
    lead.options.on_event = got.append
    await lead.run("go")
    message = next(e.data["message"] for e in got if e.kind == DELEGATION_PROGRESS and e.data["kind"] == "progress")
    assert message == "y" * 500 + "..."


async def test_task_complete_texts_and_first_call_wins():
    team = Team()
    team.add("lead", [delegate({"agent": "w", "task": "t"}), "ok"], max_delegation_depth=1)
    team.add("w", [{"tool_calls": [
        {"name": "task_complete", "arguments": {"status": "maybe", "summary": "?"}},
        {"name": "task_complete", "arguments": {"status": "completed", "summary": "first"}},
        {"name": "task_complete", "arguments": {"status": "failed", "summary": "second"}},
    ]}])
    agent = team.spawn("lead")
    await agent.run("go")
    child_tools = [m.tool_results()[0] for m in team.completers["w"][0].requests[0].messages if m.role == Role.TOOL]
    assert child_tools == []  # the child's loop ended at once: one model call
    assert team.completers["w"][0].calls == 1
    assert delegate_output(agent)[0]["completion"]["summary"] == "first"


async def test_task_complete_results_are_the_exact_texts():
    from shelly_dist.agent.completion import task_complete_tool
    from shelly_dist.agent.records import CompletionResult

    slot: list[CompletionResult] = []
    tool = task_complete_tool(lambda: slot[0] if slot else None, slot.append)
    with pytest.raises(ValueError, match='status must be "completed" or "failed", got "x"'):
        await tool.handler('{"status":"x","summary":"s"}')
    assert await tool.handler('{"status":"failed","summary":"s"}') == "Task marked as failed."
    assert "already marked" in await tool.handler('{"status":"completed","summary":"t"}')
    assert slot[0].status == "failed"
