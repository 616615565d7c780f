"""Shelly's ``handoff``: a delegated child passes its task to a peer agent, whose result becomes the
delegation's result.

The child side is the tool (depth > 0, a registry, and the child's own ``max_handoffs > 0``, as in
Shelly): it records the first valid call (later calls are ignored) and the child's loop stops after
that step. The parent side is :func:`next_peer`, called by whichever runtime ran the child (the
in-process delegator, or the worker that finished the child's run): it checks the chain limit (the
*delegating* agent's ``max_handoffs``, 3 when not above 0), self-handoff and the target's existence
with Shelly's texts, and otherwise returns the peer's :class:`ChildRequest` — the same delegation
entry (same ``key``, same requested ``agent`` name in the entry, same task and ``task_id``, so the
board task is claimed again by the peer), its chat opened by ``<handoff_context>``, its
``request_input`` auto-answers drawn from the handoff context.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from shelly_dist.agent.records import ChildRequest, DelegateEntry, HandoffResult, RunState
from shelly_dist.errors import ToolError
from shelly_dist.tools import Tool
from shelly_dist.tools.schema import shared_schema
from shelly_dist.tools.tool import parse_input

if TYPE_CHECKING:
    from shelly_dist.agent.agent import Roster

MAX_HANDOFFS_DEFAULT = 3
"""The chain limit when the delegating agent's ``max_handoffs`` is not above 0 (Shelly's)."""

DESCRIPTION = (
    "Transfer control to a peer agent. Use this when the task requires expertise outside your capabilities "
    "and another agent is better suited. The current agent's loop stops and the peer continues with the "
    "provided context."
)


class HandoffInput(BaseModel):
    target_agent: str = Field("", description="Name of the agent to hand off to")
    reason: str = Field("", description="Why you are handing off to this agent")
    context: str = Field("", description="Summary of relevant state and progress to pass to the peer agent")


def handoff_tool(get: Callable[[], HandoffResult | None], set_: Callable[[HandoffResult], None]) -> Tool:
    """The tool, bound to one run's handoff slot; the first valid call wins."""

    async def handler(arguments: str) -> str:
        data = parse_input("handoff", HandoffInput, arguments)
        for name in ("target_agent", "reason", "context"):
            if not getattr(data, name):
                raise ToolError(f"handoff: {name} is required", tool="handoff")
        if get() is not None:
            return "Handoff already initiated — duplicate call ignored."
        set_(HandoffResult.model_validate(data.model_dump()))
        return f"Handing off to {data.target_agent}."

    schema = shared_schema(HandoffInput, required=("target_agent", "reason", "context"))
    return Tool("handoff", DESCRIPTION, schema, handler, group="agents", retry_on_crash=True)


def handoff_message(from_agent: str, reason: str, context: str) -> str:
    """The peer's first user message (Shelly's text)."""
    return (f'<handoff_context>\nThis task was handed off to you by agent "{from_agent}".\nReason: {reason}\n\n'
            f"{context}\n</handoff_context>")


def next_peer(request: ChildRequest, state: RunState, registry: Roster | None) -> ChildRequest | DelegateEntry | None:
    """After a child's run ended normally: ``None`` when it did not hand off; else the peer's
    request, or the delegation's error entry when the handoff is refused."""
    handoff = state.handoff
    if handoff is None:
        return None
    target = handoff.target_agent
    limit = request.max_handoffs if request.max_handoffs > 0 else MAX_HANDOFFS_DEFAULT
    if request.handoffs >= limit:
        return DelegateEntry(agent=request.agent,
                             error=f'handoff chain limit ({limit}) reached — cannot hand off to "{target}"')
    if target.lower() == state.config_name.lower():
        return DelegateEntry(agent=request.agent,
                             error=f'self-handoff is not allowed: "{state.config_name}" cannot hand off to itself')
    if registry is None or registry.get(target) is None:
        return DelegateEntry(agent=request.agent, error=f'handoff: agent "{target}" not found')
    return request.model_copy(update={
        "handoff_to": target,
        "handoffs": request.handoffs + 1,
        "context": handoff.context,
        "opening": handoff_message(state.config_name, handoff.reason, handoff.context),
        "spent": request.entry_usage(state),
    })
