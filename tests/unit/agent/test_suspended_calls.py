"""A tool call whose result comes later (``SuspendCall``): the run suspends with the call journaled
as awaiting, survives JSON, and continues once the result is delivered (``ask_user`` on a worker)."""

from __future__ import annotations

import pytest

from shelly_dist import Message, Role, ToolBox
from shelly_dist.agent import Finished, Phase, Run, RunState, Suspended
from shelly_dist.chats import ToolResult
from shelly_dist.errors import UsageError
from shelly_dist.tools.builtin.ask import Responder, SuspendingAnswerer

from .helpers import Team, call, calls, echo_toolbox


def asking_team(*replies: object) -> Team:
    team = Team()
    ask: ToolBox = Responder(SuspendingAnswerer()).toolbox(limit=30)
    team.add("asker", list(replies), toolboxes=(ask, echo_toolbox()))
    return team


async def test_a_suspending_tool_call_suspends_the_run_and_its_result_is_delivered_later():
    team = asking_team(calls(("ask_user", {"question": "Colour?", "options": ["red", "blue"]}),
                             ("echo", {"text": "meanwhile"})), "picked")
    run = Run.start(team.spawn("asker"), [Message.text("user", Role.USER, "go")])
    outcome = await run.step()
    assert isinstance(outcome, Suspended) and outcome.requests == []
    (call_id, payload), = run.state.awaiting.items()
    assert payload["text"] == "Colour?" and payload["options"] == ["red", "blue"] and payload["timeout"] == 30
    assert payload["kind"] == "ask_user"

    state = RunState.model_validate_json(run.snapshot().model_dump_json())  # another worker, later
    resumed = Run.rebuild(team.registry, state)
    assert resumed.state.phase == Phase.SUSPENDED and resumed.waiting()
    assert resumed.deliver_result(call_id, ToolResult(tool_call_id="", content="blue")) is True
    reply = await resumed.until_done()
    assert reply.text_content() == "picked"
    tools = [m.parts[0] for m in resumed.agent.chat.messages() if m.role == Role.TOOL]
    assert [(t.content, t.is_error) for t in tools] == [("blue", False), ("meanwhile", False)]


async def test_stepping_a_run_whose_tool_call_still_awaits_its_result_is_an_error():
    team = asking_team(call("ask_user", {"question": "Colour?"}), "picked")
    run = Run.start(team.spawn("asker"), [Message.text("user", Role.USER, "go")])
    assert isinstance(await run.step(), Suspended)
    with pytest.raises(UsageError, match="still waiting on 1 tool calls"):
        await run.step()


async def test_a_second_delivery_of_the_same_result_is_ignored():
    team = asking_team(call("ask_user", {"question": "Colour?"}), "picked")
    run = Run.start(team.spawn("asker"), [Message.text("user", Role.USER, "go")])
    await run.step()
    (call_id,) = run.state.awaiting
    run.deliver_result(call_id, ToolResult(tool_call_id="", content="blue"))
    run.deliver_result(call_id, ToolResult(tool_call_id="", content="red"))
    outcome = await run.step()
    assert not isinstance(outcome, Finished)
    tools = [m.parts[0].content for m in run.agent.chat.messages() if m.role == Role.TOOL]
    assert tools == ["blue"]
