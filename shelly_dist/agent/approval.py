"""The approval gate: a person approves a gated tool call before it runs.

Which calls are gated: a tool marked ``approval`` (``@tool(approval=True)``), or one an agent's
``approval: {tools: [...]}`` names — by name or glob, ``group:<g>`` (as the tool policy reads it)
or ``toolbox:<t>`` (every tool of that toolbox, built-in, Python or MCP alike). The gate sits
after the tool policy (a tool the policy hides is never offered, so never gated) and before the
ledger (``RunState.started``): :func:`screen` runs on a step's calls before they are journaled as
started, so an approved call runs through the same at-most-once ledger as any other — a worker
that dies after the approval and before the result leaves it ``started``, and the call gets the
"outcome unknown" result instead of a second run.

Asking is the engine's :class:`Decider` (the ``ask_user`` responder): embedded it waits in this
process (a terminal, ``Session.approve``); on a worker it raises a
:class:`~shelly_dist.tools.suspend.SuspendCall`, so the call is journaled as awaiting like an
``ask_user`` call, the run is suspended holding no worker slot, and the verdict is delivered later
(:meth:`~shelly_dist.agent.Run.deliver_decision`) on whatever worker resumes it. Either way the
verdict is applied here (:func:`apply_verdict`): approved calls are remembered in
``RunState.approved`` (with a person's edited arguments), rejected ones get an error result that
says why, and the ``approval_decided`` event names who decided.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from fnmatch import fnmatchcase
from typing import Any, Protocol

from shelly_dist import events, identity
from shelly_dist.agent.records import RunState
from shelly_dist.chats import ToolCall, ToolResult
from shelly_dist.observability import metrics
from shelly_dist.tools.decisions import APPROVAL, INTERRUPTED, Approval, Verdict, rejected_text
from shelly_dist.tools.policy import matches
from shelly_dist.tools.suspend import SuspendCall
from shelly_dist.tools.tool import Tool


class Run(Protocol):
    """What the gate needs of a run (:class:`~shelly_dist.agent.run.Run`): its state and events."""

    state: RunState

    def emit(self, kind: str, **data: object) -> None: ...

__all__ = ["ApprovalPolicy", "Decider", "apply_verdict", "screen"]


class Decider(Protocol):
    """Gets a person's verdict on an approval (the engine's ``ask_user`` responder)."""

    async def decide(self, approval: Approval, session: str = "") -> Verdict: ...


class ApprovalPolicy:
    """An agent's ``approval:``: the patterns of the tools a person approves, and how long a call
    waits for the verdict (``timeout`` seconds; 0: no limit). Immutable; shared by its runs."""

    def __init__(self, tools: Sequence[str] = (), timeout: float = 0.0) -> None:
        self.tools = list(tools)
        self.timeout = timeout

    def gates(self, tool: Tool, toolbox: str = "") -> bool:
        """Whether ``tool`` (of the toolbox named ``toolbox``) needs a person's approval."""
        if tool.approval:
            return True
        for pattern in self.tools:
            if pattern.startswith("toolbox:"):
                if toolbox and fnmatchcase(toolbox, pattern.removeprefix("toolbox:")):
                    return True
            elif matches(tool, pattern):
                return True
        return False

    def __repr__(self) -> str:
        return f"ApprovalPolicy(tools={self.tools!r}, timeout={self.timeout!r})"


async def screen(run: Run, calls: list[ToolCall], gated: set[str], decider: Decider | None,
                 limit: float) -> None:
    """Decide every gated call of ``calls`` that has no verdict yet, together (each waiting at
    most ``limit`` seconds; 0: no limit). Each ends approved
    (``RunState.approved``), rejected (an error result), or awaiting (the run suspends until its
    verdict is delivered). Idempotent: a call already approved is not asked again."""
    import asyncio

    state = run.state
    todo = [c for c in calls if c.name in gated and c.id not in state.approved]
    if todo:
        await asyncio.gather(*(_ask(run, call, decider, limit) for call in todo))


async def _ask(run: Run, call: ToolCall, decider: Decider | None, limit: float) -> None:
    approval = Approval(tool=call.name, arguments=call.arguments, path=identity.run_path(), timeout=limit)
    asked = time.time()
    if decider is None:
        from shelly_dist.tools.decisions import NOBODY_APPROVES

        apply_verdict(run, call.id, call.name, Verdict.reject(NOBODY_APPROVES, by="nobody"), asked=asked)
        return
    try:
        verdict = await decider.decide(approval, identity.session_id())
    except SuspendCall as suspend:  # journaled with the suspension; the verdict comes later
        run.state.awaiting[call.id] = {"kind": suspend.kind, "tool": call.name, "asked": asked, **suspend.payload}
        return
    apply_verdict(run, call.id, call.name, verdict, asked=asked)


def apply_verdict(run: Run, call_id: str, tool: str, verdict: Verdict, *, asked: float = 0.0,
                  decision_id: str = "") -> None:
    """Apply a person's ``verdict`` to gated call ``call_id``: approved calls run on this step
    (with edited arguments when given), rejected and skipped ones get their error result now."""
    state = run.state
    if verdict.decision == "approve":
        state.approved[call_id] = verdict.arguments or ""
    else:
        content = INTERRUPTED if verdict.decision == "skip" else rejected_text(tool, verdict.reason)
        state.tool_results[call_id] = ToolResult(tool_call_id=call_id, content=content, is_error=True)
        run.emit(events.TOOL_CALL_END, tool=tool, call_id=call_id, is_error=True)
    data: dict[str, Any] = {"id": decision_id or verdict.id, "tool": tool, "call_id": call_id,
                            "decision": verdict.decision, "by": verdict.by}
    if verdict.reason:
        data["reason"] = verdict.reason
    if verdict.arguments:
        data["arguments"] = verdict.arguments
    if verdict.always:
        data["always"] = True
    run.emit(events.APPROVAL_DECIDED, **data)
    metrics.decided(APPROVAL, asked, by=verdict.by)
