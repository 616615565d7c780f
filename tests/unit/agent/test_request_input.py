"""Shelly's ``request_input`` embedded (behaviours 50–51): the question sent, the errors, and the
blocking-delegation auto-answer from the delegation context — or the handoff context for a peer."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from shelly_dist.agent.interaction import ChildQuestion, auto_answer, request_input_tool
from shelly_dist.events import Event

from .helpers import Team, call, complete


def ask_parent(question: str) -> dict[str, Any]:
    return call("request_input", {"question": question})


async def test_request_input_sends_its_question_and_returns_the_answer():
    asked: list[ChildQuestion] = []

    async def answer(q: ChildQuestion) -> str:
        asked.append(q)
        return f"answer {len(asked)}"

    tool = request_input_tool(lambda: "coder-fix-1", answer)
    assert await tool.handler(json.dumps({"question": "Which DB?"})) == "answer 1"
    assert await tool.handler(json.dumps({"question": "Which port?"})) == "answer 2"
    assert [q.model_dump() for q in asked] == [
        {"id": "q-1", "agent": "coder-fix-1", "content": "Which DB?"},
        {"id": "q-2", "agent": "coder-fix-1", "content": "Which port?"}]


async def test_request_input_with_an_empty_question_is_an_error():
    tool = request_input_tool(lambda: "c", auto_answer("ctx"))
    with pytest.raises(Exception, match="request_input: question is required"):
        await tool.handler(json.dumps({"question": ""}))


async def test_cancellation_while_waiting_for_the_answer_is_the_cancellation_error():
    waiting = asyncio.Event()

    async def never(q: ChildQuestion) -> str:
        waiting.set()
        await asyncio.Event().wait()
        return ""

    task = asyncio.create_task(request_input_tool(lambda: "c", never).handler(json.dumps({"question": "q"})))
    await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def tool_texts(seen: list[Event], prefix: str) -> list[str]:
    return [e.data["text"] for e in seen
            if e.kind == "message_added" and e.data["role"] == "tool" and e.agent.startswith(prefix)]


async def test_blocking_delegation_answers_request_input_with_the_delegation_context():
    team = Team()
    team.add("coder", [ask_parent("Which DB?"), complete("done")])
    team.add("lead", [call("delegate", {"tasks": [{"agent": "coder", "task": "fix", "context": "use postgres"}]}),
                      "ok"], max_delegation_depth=1)
    lead = team.spawn("lead")
    seen: list[Event] = []
    lead.options.on_event = seen.append
    await lead.run("go")
    assert tool_texts(seen, "coder-")[0] == (
        'Based on the delegation context for your question "Which DB?":\n\nuse postgres')
    assert "request_input" not in team.requests("lead")[0].tool_names


async def test_after_a_handoff_the_peers_answer_uses_the_handoff_context_not_the_original():
    team = Team()
    team.add("planner", [call("handoff", {"target_agent": "coder", "reason": "r", "context": "handoff ctx"})],
             max_handoffs=1)
    team.add("coder", [ask_parent("What now?"), complete("done")])
    team.add("lead", [call("delegate", {"tasks": [{"agent": "planner", "task": "t", "context": "original ctx"}]}),
                      "ok"], max_delegation_depth=1)
    lead = team.spawn("lead")
    seen: list[Event] = []
    lead.options.on_event = seen.append
    await lead.run("go")
    (answer,) = [t for t in tool_texts(seen, "coder-") if t.startswith("Based on")]
    assert "handoff ctx" in answer and "original ctx" not in answer


def interactive_delegate() -> dict[str, Any]:
    return call("delegate", {"tasks": [{"agent": "coder", "task": "fix", "context": "", "mode": "interactive"}]})


async def test_interactive_mode_without_interactive_config_is_refused_with_shellys_error():
    team = Team()
    team.add("coder", [complete("done")])
    team.add("lead", [interactive_delegate(), "ok"], max_delegation_depth=1)
    lead = team.spawn("lead")
    seen: list[Event] = []
    lead.options.on_event = seen.append
    await lead.run("go")
    assert tool_texts(seen, "lead") == ["delegate: interactive mode requires interaction_mode: interactive in config"]
    assert team.requests("coder") == []
