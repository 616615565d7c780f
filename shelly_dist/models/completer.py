"""The one interface every model implements.

A completer gets the chat and the tools on every call, so it holds no tool state, and returns the
assistant message without appending it: the agent loop appends (Shelly's contract). A completer
reports the call's token usage in ``message.metadata["usage"]`` (see :class:`Usage`), so usage is
attributed to the run that made the call without any shared lock.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from shelly_dist.chats import Chat, Message


@runtime_checkable
class ToolSpec(Protocol):
    """What a completer needs to know of a tool: name, description and JSON schema."""

    name: str
    description: str
    input_schema: dict[str, Any]


@runtime_checkable
class Completer(Protocol):
    """Produces the next assistant message for a chat."""

    async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
        """Return the model's reply to ``chat``; never append it."""
        ...
