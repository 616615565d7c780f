"""shared_schema: the built-in tools every run rebuilds share one schema dict per process."""

from __future__ import annotations

from shelly_dist.agent.completion import task_complete_tool
from shelly_dist.agent.handoff import handoff_tool
from shelly_dist.agent.interaction import auto_answer, request_input_tool


def _none() -> None:
    return None


def _ignore(_: object) -> None:
    return None


def test_task_complete_tools_of_two_runs_share_one_schema() -> None:
    first, second = task_complete_tool(_none, _ignore), task_complete_tool(_none, _ignore)
    assert first.input_schema is second.input_schema


def test_request_input_tools_share_one_schema_with_question_required() -> None:
    first = request_input_tool(lambda: "a", auto_answer(""))
    second = request_input_tool(lambda: "b", auto_answer(""))
    assert first.input_schema is second.input_schema
    assert first.input_schema["required"] == ["question"]


def test_handoff_tools_share_one_schema_with_every_field_required() -> None:
    first, second = handoff_tool(_none, _ignore), handoff_tool(_none, _ignore)
    assert first.input_schema is second.input_schema
    assert first.input_schema["required"] == ["target_agent", "reason", "context"]

