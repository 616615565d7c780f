"""Fixtures for provider tests: a loopback model server per test, and small builders."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from shelly_dist.chats import Chat, Message, Role, ToolCall, ToolResult
from shelly_dist.providers.http import aclose_http_client
from shelly_dist.testing.model_server import ModelServer


@dataclass
class ToolDef:
    """A tool spec as the completer sees it."""

    name: str
    description: str = "a tool"
    input_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@pytest.fixture(autouse=True)
async def _close_http_client() -> AsyncIterator[None]:
    """Each test's event loop gets its own pooled client; close it with the loop."""
    yield
    await aclose_http_client()


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer() as s:
        yield s


def chat_of(*messages: Message) -> Chat:
    return Chat(messages)


def system(text: str = "You are a tester.") -> Message:
    return Message.text("", Role.SYSTEM, text)


def user(text: str = "hello") -> Message:
    return Message.text("user", Role.USER, text)


def assistant_calls(*calls: tuple[str, str, str]) -> Message:
    """An assistant message with tool calls given as (id, name, arguments JSON)."""
    return Message(role=Role.ASSISTANT, parts=[ToolCall(id=i, name=n, arguments=a) for i, n, a in calls])


def tool_result(call_id: str, content: str, *, is_error: bool = False) -> Message:
    return Message(role=Role.TOOL, parts=[ToolResult(tool_call_id=call_id, content=content, is_error=is_error)])
