"""What a hook or a guardrail is given, and what a hook may do.

A run on the pool is many Celery tasks on many workers, so nothing may wrap "the whole run" in one
Python call. A hook is called by the step machine at fixed points instead, and whatever it must
remember between those points it keeps in :attr:`RunContext.state`: a JSON-able dict journaled
with the run, so the next point may be called on another worker, after a suspension, by a fresh
instance of the hook, and still see it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from shelly_dist.chats import Chat, Message, ToolCall, ToolResult

HOOK_POINTS = ("on_run_start", "before_model", "after_model", "before_tool", "after_tool", "on_run_end",
               "on_run_error", "deadline")
"""The methods the step machine looks for on a hook; each one is optional."""


@dataclass
class RunContext:
    """The run a hook or guardrail is called for.

    ``agent`` is the agent's config name, ``instance`` its instance name (``coder-refactor-1`` for a
    delegated child), ``task`` the text the run was started with, ``state`` this hook's own JSON-able
    memory of this run (journaled with it: keep only what ``json.dumps`` takes)."""

    agent: str
    run_id: str
    depth: int = 0
    session: str = ""
    instance: str = ""
    task: str = ""
    state: dict[str, Any] = field(default_factory=dict)


class Hook(Protocol):
    """Lifecycle hooks on the step machine; a hook defines any subset of these (all optional):

    - ``async on_run_start(ctx)``: once per run, before its first model call;
    - ``async before_model(ctx, chat)``: before each model call (the chat may be read, not kept);
    - ``async after_model(ctx, reply)``: after each model call; returning a ``Message`` replaces it;
    - ``async before_tool(ctx, call)``: before each tool call; returning a ``ToolResult`` answers
      the call without running the tool;
    - ``async after_tool(ctx, call, result)``: after each tool call; returning a ``ToolResult``
      replaces the result the model sees;
    - ``async on_run_end(ctx, reply) -> reply``: on the final reply, before the run is journaled as
      done; it may return another reply, or raise to fail the run;
    - ``async on_run_error(ctx, error) -> error``: the run is failing with ``error``; return the
      error to raise instead (or the same one);
    - ``deadline(ctx) -> float | None``: a wall-clock time (``time.time()``) after which the run
      fails with ``StepTimeout``; the step in flight is interrupted at that instant.

    A hook that raises fails the run with ``hook <name> failed: <error>`` (a shelly-dist error
    passes through unchanged). Hooks run in the order the agent lists them, at every point.
    """

    name: str


class BaseHook:
    """A hook that changes nothing; subclass and override the points you need."""

    name = ""

    async def on_run_start(self, ctx: RunContext) -> None:
        return None

    async def before_model(self, ctx: RunContext, chat: Chat) -> None:
        return None

    async def after_model(self, ctx: RunContext, reply: Message) -> Message | None:
        return None

    async def before_tool(self, ctx: RunContext, call: ToolCall) -> ToolResult | None:
        return None

    async def after_tool(self, ctx: RunContext, call: ToolCall, result: ToolResult) -> ToolResult | None:
        return None

    async def on_run_end(self, ctx: RunContext, reply: Message) -> Message:
        return reply
