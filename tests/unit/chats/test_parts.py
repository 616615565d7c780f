"""Content parts survive JSON, and the discriminated union rebuilds the right class."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from shelly_dist.chats import Document, Image, Message, Part, Role, Text, ToolCall, ToolResult

PARTS = TypeAdapter(Part)

SAMPLES = [
    Text(text="hello"),
    Image(url="https://example.test/a.png", data="aGk=", media_type="image/png"),
    Document(path="spec.pdf", data="JVBERi0=", media_type="application/pdf"),
    ToolCall(id="c1", name="echo", arguments='{"text":"x"}', metadata={"thoughtSignature": "sig=="}),
    ToolResult(tool_call_id="c1", content="x", is_error=True),
]


@pytest.mark.parametrize("part", SAMPLES, ids=lambda p: p.kind)
def test_every_part_round_trips_through_json(part: Part) -> None:
    rebuilt = PARTS.validate_json(PARTS.dump_json(part))
    assert type(rebuilt) is type(part)
    assert rebuilt == part


@pytest.mark.parametrize(
    ("kind", "cls"),
    [("text", Text), ("image", Image), ("document", Document), ("tool_call", ToolCall), ("tool_result", ToolResult)],
)
def test_kind_string_selects_the_part_class(kind: str, cls: type) -> None:
    payload = {
        "text": {"kind": "text", "text": "t"},
        "image": {"kind": "image", "url": "u"},
        "document": {"kind": "document", "path": "p"},
        "tool_call": {"kind": "tool_call", "id": "1", "name": "n"},
        "tool_result": {"kind": "tool_result", "tool_call_id": "1", "content": "c"},
    }[kind]
    assert type(PARTS.validate_python(payload)) is cls


def test_tool_call_metadata_survives_a_message_round_trip() -> None:
    msg = Message(
        sender="a",
        role=Role.ASSISTANT,
        parts=[ToolCall(id="c1", name="t", arguments="{}", metadata={"thoughtSignature": "abc"})],
    )
    rebuilt = Message.model_validate_json(msg.model_dump_json())
    assert rebuilt.tool_calls()[0].metadata == {"thoughtSignature": "abc"}


def test_message_round_trip_keeps_part_order_and_classes() -> None:
    msg = Message(sender="a", role=Role.ASSISTANT, parts=list(SAMPLES), metadata={"k": [1, 2]})
    rebuilt = Message.model_validate_json(msg.model_dump_json())
    assert [type(p) for p in rebuilt.parts] == [type(p) for p in SAMPLES]
    assert rebuilt == msg


def test_unknown_kind_is_rejected() -> None:
    with pytest.raises(ValidationError):
        PARTS.validate_python({"kind": "audio", "data": "x"})


def test_tool_call_arguments_default_to_empty_object() -> None:
    assert ToolCall(id="1", name="n").arguments == "{}"
