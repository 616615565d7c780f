"""Tool hooks: the extension point around every tool call.

The agent loop calls ``before_tool`` for each call; a hook that returns a :class:`ToolResult`
answers the call itself and the tool never runs (a policy refusal, a cached answer). Then
``after_tool`` may rewrite the result (add a warning). A hook that raises an
:class:`~shelly_dist.errors.AgentError` (such as ``LoopDetected``) stops the whole run; any other
exception becomes an error result, like a failing tool.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from shelly_dist.chats import ToolCall, ToolResult


@runtime_checkable
class ToolHook(Protocol):
    """Runs around each tool call of one agent run."""

    async def before_tool(self, call: ToolCall) -> ToolResult | None:
        """Return a result to answer the call without running the tool, or ``None`` to go on."""
        ...

    async def after_tool(self, call: ToolCall, result: ToolResult) -> ToolResult:
        """Return the result the model will see (usually ``result`` unchanged)."""
        ...


class BaseToolHook:
    """A hook that changes nothing; subclass and override one side."""

    async def before_tool(self, call: ToolCall) -> ToolResult | None:
        return None

    async def after_tool(self, call: ToolCall, result: ToolResult) -> ToolResult:
        return result
