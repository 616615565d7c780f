"""Tool hooks: the extension point around every tool call.

The agent loop calls ``before_tool`` for each call; a hook that returns a :class:`ToolResult`
answers the call itself and the tool never runs (a policy refusal, a cached answer). Then
``after_tool`` may rewrite the result (add a warning). A hook that raises an
:class:`~shelly_dist.errors.AgentError` (such as ``LoopDetected``) stops the whole run; any other
exception becomes an error result, like a failing tool.

A hook that must remember something across the calls of one run (the loop detector's counts)
keeps it in :func:`run_memory`, not on itself: the run binds its own journaled memory around each
step (:func:`bind_run_memory`), so the memory follows the run to another worker or past a
suspension, where a fresh agent — and fresh hooks — continue it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
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


_memory: ContextVar[dict[str, dict[str, int]] | None] = ContextVar("shelly_hook_memory", default=None)


def run_memory(hook: str) -> dict[str, int] | None:
    """The current run's memory for ``hook`` (created empty), or ``None`` outside a run."""
    memory = _memory.get()
    return None if memory is None else memory.setdefault(hook, {})


@contextmanager
def bind_run_memory(memory: dict[str, dict[str, int]]) -> Iterator[None]:
    """Make ``memory`` (part of the run's journaled state) the hooks' memory inside the block."""
    token = _memory.set(memory)
    try:
        yield
    finally:
        _memory.reset(token)
