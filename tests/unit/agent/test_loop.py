"""The ReAct loop (SHELLY_BEHAVIOURS §2.2, behaviours 1–6 and 9)."""

from __future__ import annotations

import asyncio

import pytest

from shelly_dist import (
    Agent,
    AgentOptions,
    MaxIterationsExceeded,
    Message,
    ModelError,
    Role,
    ScriptedCompleter,
)
from shelly_dist.agent import Run
from shelly_dist.agent.run import CAP_MARKER, RESULT_CAP, WARNING_TEXT
from shelly_dist.tools import Tool, ToolBox

from .helpers import call, calls, echo_toolbox


def agent_with(replies, *, toolboxes=(), repeat_last=False, **options) -> tuple[Agent, ScriptedCompleter]:
    completer = ScriptedCompleter(replies, repeat_last=repeat_last)
    agent = Agent("solo", "a test agent", completer=completer, options=AgentOptions(**options))
    agent.add_toolboxes(*toolboxes)
    return agent, completer


async def test_reply_without_tool_calls_is_the_final_answer_after_one_call():
    agent, completer = agent_with(["hello there"])
    reply = await agent.run("hi")
    assert reply.text_content() == "hello there"
    assert reply.sender == "solo"
    assert completer.calls == 1


async def test_tool_call_runs_the_tool_then_calls_the_model_again():
    agent, completer = agent_with([call("echo", {"text": "ping"}), "done"], toolboxes=(echo_toolbox(),))
    reply = await agent.run("go")
    assert reply.text_content() == "done"
    assert completer.calls == 2
    tool_msgs = [m for m in agent.chat.messages() if m.role == Role.TOOL]
    assert tool_msgs[0].tool_results()[0].content == "ping"


async def test_three_replies_make_exactly_three_model_calls():
    agent, completer = agent_with(
        [call("echo", {"text": "a"}), call("echo", {"text": "b"}), "end"], toolboxes=(echo_toolbox(),)
    )
    await agent.run("go")
    assert completer.calls == 3


async def test_max_iterations_fails_with_its_own_error_after_exactly_that_many_calls():
    agent, completer = agent_with([call("echo")], repeat_last=True, toolboxes=(echo_toolbox(),), max_iterations=2)
    with pytest.raises(MaxIterationsExceeded, match="max iterations reached"):
        await agent.run("loop")
    assert completer.calls == 2


async def test_iteration_warning_is_injected_once_from_the_warn_index():
    agent, completer = agent_with(
        [call("echo")], repeat_last=True, toolboxes=(echo_toolbox(),), max_iterations=4, warn_iterations=2
    )
    with pytest.raises(MaxIterationsExceeded):
        await agent.run("loop")
    seen = [sum(WARNING_TEXT in m.text_content() for m in r.messages) for r in completer.requests]
    assert seen == [0, 0, 1, 1]


async def test_provider_error_is_raised_unchanged():
    agent, _ = agent_with([{"error": "overloaded today"}])
    with pytest.raises(ModelError, match="overloaded today"):
        await agent.run("hi")


async def test_cancelling_the_run_raises_cancellation():
    started = asyncio.Event()

    async def slow(arguments: str) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    box = ToolBox([Tool("slow", "waits forever", {"type": "object"}, slow)])
    agent, _ = agent_with([call("slow"), "unreachable"], toolboxes=(box,))
    task = asyncio.create_task(agent.run("go"))
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not [m for m in agent.chat.messages() if m.role == Role.TOOL]


async def test_unknown_tool_gives_an_error_result_and_the_loop_continues():
    agent, _ = agent_with([call("nope"), "recovered"])
    reply = await agent.run("go")
    assert reply.text_content() == "recovered"
    result = next(m for m in agent.chat.messages() if m.role == Role.TOOL).tool_results()[0]
    assert result.is_error and result.content == "tool not found: nope"


async def test_task_complete_is_not_available_at_top_level():
    agent, _ = agent_with([call("task_complete", {"status": "completed", "summary": "x"}), "ok"])
    await agent.run("go")
    result = next(m for m in agent.chat.messages() if m.role == Role.TOOL).tool_results()[0]
    assert result.content == "tool not found: task_complete"


async def test_handler_exception_becomes_an_error_result_with_its_text():
    agent, _ = agent_with([call("boom"), "after"], toolboxes=(echo_toolbox(),))
    await agent.run("go")
    result = next(m for m in agent.chat.messages() if m.role == Role.TOOL).tool_results()[0]
    assert result.is_error and result.content == "boom"


async def test_tool_calls_of_one_reply_run_concurrently_and_results_keep_call_order():
    gate = asyncio.Event()
    arrived: list[str] = []

    async def first(arguments: str) -> str:
        arrived.append("first")
        await asyncio.wait_for(gate.wait(), 10)
        return "first done"

    async def second(arguments: str) -> str:
        arrived.append("second")
        gate.set()
        return "second done"

    box = ToolBox([Tool("first", "", {"type": "object"}, first), Tool("second", "", {"type": "object"}, second)])
    agent, _ = agent_with([calls(("first", {}), ("second", {})), "end"], toolboxes=(box,))
    await agent.run("go")
    tool_msgs = [m for m in agent.chat.messages() if m.role == Role.TOOL]
    assert [m.tool_results()[0].content for m in tool_msgs] == ["first done", "second done"]
    assert all(m.sender == "solo" for m in tool_msgs)


async def test_long_success_result_is_capped_with_a_marker():
    async def big(arguments: str) -> str:
        return "x" * (RESULT_CAP + 10)

    box = ToolBox([Tool("big", "", {"type": "object"}, big)])
    agent, _ = agent_with([call("big"), "end"], toolboxes=(box,))
    await agent.run("go")
    content = next(m for m in agent.chat.messages() if m.role == Role.TOOL).tool_results()[0].content
    assert content.endswith(CAP_MARKER) and "[output capped" in content
    assert len(content) == RESULT_CAP + len(CAP_MARKER)


async def test_long_error_result_is_capped_like_a_success():
    async def big_error(arguments: str) -> str:
        raise RuntimeError("e" * (RESULT_CAP + 10))

    box = ToolBox([Tool("bigerr", "", {"type": "object"}, big_error)])
    agent, _ = agent_with([call("bigerr"), "end"], toolboxes=(box,))
    await agent.run("go")
    result = next(m for m in agent.chat.messages() if m.role == Role.TOOL).tool_results()[0]
    assert result.is_error and result.content.endswith(CAP_MARKER)
    assert len(result.content) == RESULT_CAP + len(CAP_MARKER)


async def test_system_prompt_is_rebuilt_on_every_run():
    agent, _ = agent_with(["one", "two"])
    await agent.run("first")
    agent.instructions = "new instructions"
    await agent.run("second")
    msgs = agent.chat.messages()
    assert sum(m.role == Role.SYSTEM for m in msgs) == 1
    assert "new instructions" in msgs[0].text_content()


async def test_usage_is_added_up_per_run_and_per_agent():
    agent, _ = agent_with([call("echo", {"text": "a"}), "end"], toolboxes=(echo_toolbox(),))
    run = Run.start(agent, [Message.text("user", Role.USER, "go")])
    await run.until_done()
    assert run.state.usage.output_tokens > 0
    assert agent.usage.total() == run.state.usage
    assert agent.usage.count() == 2
