"""Message helpers: text(), text_content(), tool_calls(), tool_results(), get_meta()."""

from __future__ import annotations

from shelly_dist.chats import Image, Message, Role, Text, ToolCall, ToolResult


def test_text_builds_a_single_text_part_with_sender_and_role() -> None:
    msg = Message.text("alice", "user", "hi")
    assert msg.sender == "alice"
    assert msg.role is Role.USER
    assert msg.parts == [Text(text="hi")]


def test_text_content_joins_text_parts_with_no_separator() -> None:
    msg = Message(
        role=Role.ASSISTANT,
        parts=[Text(text="foo"), ToolCall(id="1", name="t"), Text(text="bar"), Image(url="u"), Text(text="baz")],
    )
    assert msg.text_content() == "foobarbaz"


def test_text_content_is_empty_without_text_parts() -> None:
    msg = Message(role=Role.ASSISTANT, parts=[ToolCall(id="1", name="t")])
    assert msg.text_content() == ""


def test_tool_calls_returns_the_tool_call_parts_in_order() -> None:
    a, b = ToolCall(id="1", name="a"), ToolCall(id="2", name="b")
    msg = Message(role=Role.ASSISTANT, parts=[Text(text="x"), a, Text(text="y"), b])
    assert msg.tool_calls() == [a, b]


def test_tool_results_returns_the_tool_result_parts_in_order() -> None:
    r1, r2 = ToolResult(tool_call_id="1", content="a"), ToolResult(tool_call_id="2", content="b")
    msg = Message(role=Role.TOOL, parts=[r1, r2])
    assert msg.tool_results() == [r1, r2]


def test_get_meta_returns_default_for_a_missing_key() -> None:
    msg = Message(role=Role.USER, metadata={"a": 1})
    assert msg.get_meta("a") == 1
    assert msg.get_meta("b", "dflt") == "dflt"
