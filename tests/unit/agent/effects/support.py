"""Builders for effect tests: replies with usage, and tool turns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shelly_dist import Message, Role, ToolCall, ToolResult
from shelly_dist.models import Usage


def reply(text: str = "", *, calls: Sequence[tuple[str, dict[str, Any]]] = (), input_tokens: int = 0,
          output_tokens: int = 0) -> Message:
    """An assistant reply with tool calls and a reported usage."""
    import json

    parts: list[Any] = [ToolCall(id=f"c{i}-{name}", name=name, arguments=json.dumps(args))
                        for i, (name, args) in enumerate(calls)]
    if text:
        parts.insert(0, {"kind": "text", "text": text})
    message = Message.model_validate({"role": "assistant", "parts": parts})
    return Usage(input_tokens=input_tokens, output_tokens=output_tokens).attach(message)


def tool_turn(call_id: str, name: str, result: str, *, args: str = "{}", error: bool = False) -> list[Message]:
    """An assistant message with one call and the tool message answering it."""
    return [
        Message(sender="tester", role=Role.ASSISTANT, parts=[ToolCall(id=call_id, name=name, arguments=args)]),
        Message(sender="tester", role=Role.TOOL,
                parts=[ToolResult(tool_call_id=call_id, content=result, is_error=error)]),
    ]
