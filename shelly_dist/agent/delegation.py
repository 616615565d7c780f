"""``delegate``: its input, the checks that reject a whole call, and the entry of each child.

The JSON contract is Shelly's (SHELLY_BEHAVIOURS §1.6.5): an array in input order with one entry
per task; errors are per entry; self-delegation and the depth limit reject the whole call. Running
the children is not done here: a step that meets ``delegate`` turns it into
:class:`ChildRequest` records and the runtime decides where they run. What a finished child means
for its entry (:func:`entry_from_outcome`) is here, so every runtime maps outcomes the same way.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, Field, ValidationError
from pydantic.json_schema import SkipJsonSchema

from shelly_dist.agent.agent import Roster
from shelly_dist.agent.records import ChildRequest, CompletionResult, DelegateEntry, keyed_run_id
from shelly_dist.agent.stops import SIBLING_FAILED, TASK_CANCELED, DelegationClosed, SiblingFailed
from shelly_dist.chats import Message, Role
from shelly_dist.errors import (
    BudgetExhausted,
    DelegationRejected,
    LimitExceeded,
    MaxIterationsExceeded,
    RunCancelled,
)
from shelly_dist.tools import Tool
from shelly_dist.tools.schema import shared_schema

CONTEXT_LIMIT = 16_000
RESULT_LIMIT = 2_000


class DelegateTask(BaseModel):
    agent: str = Field(description="Name of the agent to delegate to (see list_agents).")
    task: str = Field(description="What the agent must do, stated completely.")
    context: str = Field(description="Everything the agent needs to know: background, constraints, files.")
    task_id: str | None = Field(default=None, description="Optional task-board id the agent works on.")
    mode: str | None = Field(
        default=None,
        description=("Delegation mode. 'interactive' returns immediately when children ask questions. "
                     "Default is blocking."),
        json_schema_extra={"enum": ["blocking", "interactive"]},
    )


    turn: SkipJsonSchema[str | None] = None
    """Set by a team's coordinator only (not offered to models): this task is a member's turn,
    continuing the chat of its previous one (``<iteration>:<tool_call_id>:<index>``) when not empty."""


class DelegateInput(BaseModel):
    tasks: list[DelegateTask] = Field(description="Tasks to run in parallel, one per agent instance.")


DELEGATE_DESCRIPTION = (
    "Delegate tasks to other agents. All tasks run in parallel; the result is a JSON array in the same "
    "order, one entry per task with the agent's result, its completion report, or an error."
)


def delegate_tool() -> Tool:
    """The ``delegate`` tool definition. Its calls are executed by the run, never by a handler."""

    async def not_called_directly(arguments: str) -> str:
        raise DelegationRejected("delegate: must be executed by an agent run")

    return Tool("delegate", DELEGATE_DESCRIPTION, shared_schema(DelegateInput), not_called_directly, group="agents")


def parse_delegate_input(arguments: str) -> DelegateInput:
    try:
        return DelegateInput.model_validate_json(arguments or "{}")
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise DelegationRejected(f"delegate: invalid input: {where}: {first['msg']}") from exc


def plan_children(
    *,
    call_id: str,
    arguments: str,
    registry: Roster | None,
    config_name: str,
    instance_name: str,
    depth: int,
    max_depth: int,
    visited: list[str],
    run_id: str,
    fail_fast: bool = False,
    interaction_mode: str = "",
    delegation_base: int = 0,
) -> tuple[list[DelegateEntry | None], list[ChildRequest], bool]:
    """Check a ``delegate`` call and split it into ready entries and child requests, and say
    whether the call is interactive (one ``mode: interactive`` task makes it so; its children are
    numbered ``d-N`` after ``delegation_base``, one number per task).

    Raises ``DelegationRejected`` for what rejects the whole call (bad JSON, self-delegation,
    depth, interactive mode without ``interaction_mode: interactive``). Unknown agents and cycles
    give per-entry errors.
    """
    spec = parse_delegate_input(arguments)
    if any(t.agent.lower() == config_name.lower() for t in spec.tasks):
        raise DelegationRejected("delegate: self-delegation is not allowed", agent=instance_name)
    if max_depth <= 0 or depth >= max_depth:
        raise DelegationRejected(f"delegate: max delegation depth {max_depth} reached", agent=instance_name)
    interactive = any(t.mode == "interactive" for t in spec.tasks)
    if interactive and interaction_mode != "interactive":
        raise DelegationRejected(
            "delegate: interactive mode requires interaction_mode: interactive in config", agent=instance_name
        )
    entries: list[DelegateEntry | None] = []
    requests: list[ChildRequest] = []
    chain = visited or [config_name]
    for i, t in enumerate(spec.tasks):
        if registry is None or registry.get(t.agent) is None:
            entries.append(DelegateEntry(agent=t.agent, error=f'agent "{t.agent}" not found'))
            continue
        if t.agent in chain:
            path = " -> ".join([*chain, t.agent])
            entries.append(DelegateEntry(agent=t.agent, error=f"cycle detected: {path}"))
            continue
        entries.append(None)
        requests.append(
            ChildRequest(
                key=f"{call_id}:{i}",
                tool_call_id=call_id,
                index=i,
                agent=t.agent,
                task=t.task,
                context=t.context,
                task_id=t.task_id or None,
                depth=depth + 1,
                visited=[*chain, t.agent],
                parent_run_id=run_id,
                parent_agent=instance_name,
                fail_fast=fail_fast and not interactive,  # an interactive call has no fail-fast (nor has Shelly)
                delegation_id=f"d-{delegation_base + i + 1}" if interactive else "",
                turn=t.turn is not None,
                history=keyed_run_id(run_id, t.turn) if t.turn else "",
            )
        )
    return entries, requests, interactive


def format_entries(entries: list[DelegateEntry]) -> str:
    """The tool result text: the JSON array in input order."""
    return json.dumps([e.to_json() for e in entries], ensure_ascii=False)


def delegation_context(context: str) -> str:
    """The ``<delegation_context>`` user message text ("" when there is no context)."""
    if not context:
        return ""
    if len(context) > CONTEXT_LIMIT:
        context = context[:CONTEXT_LIMIT] + "… [context truncated]"
    return f"<delegation_context>\n{context}\n</delegation_context>"


def child_messages(request: ChildRequest) -> list[Message]:
    """The child's chat after its system prompt: the context (when any), the prior reflections
    (when any), then the task."""
    out = []
    ctx = request.opening or delegation_context(request.context)  # a handoff's peer: <handoff_context>
    if ctx:
        out.append(Message.text("user", Role.USER, ctx))
    if request.reflections:
        out.append(Message.text("user", Role.USER, request.reflections))
    out.append(Message.text("user", Role.USER, request.task))
    return out


def _result_text(reply: str, completion: CompletionResult | None) -> str:
    if completion is not None:
        if completion.summary:
            return completion.summary
        return f"{completion.status}: {completion.caveats}" if completion.caveats else completion.status
    if len(reply) > RESULT_LIMIT:
        return reply[:RESULT_LIMIT] + "… [truncated]"
    return reply


def exhausted_completion(instance: str, max_iterations: int) -> CompletionResult:
    """The synthetic ``failed`` completion of a child that ran out of iterations."""
    return CompletionResult(
        status="failed",
        summary=(
            f'Agent "{instance}" exhausted its iteration budget ({max_iterations} iterations) '
            "before calling task_complete."
        ),
        caveats="Iteration limit reached. Check progress notes and partial results before retrying.",
    )


def budget_completion(agent: str, error: BudgetExhausted) -> CompletionResult:
    """The synthetic ``failed`` completion of a child whose token or time budget ran out (Shelly's
    texts, naming the agent as the delegation asked for it). A tree limit names itself in the
    caveats, since the subtree it bounds may be wider than this child."""
    if isinstance(error, LimitExceeded):
        return CompletionResult(
            status="failed",
            summary=f'Agent "{agent}" exhausted its {error.limit} budget without completing the task.',
            caveats=f"{error}. Check progress notes for partial work.",
        )
    return CompletionResult(
        status="failed",
        summary=f'Agent "{agent}" exhausted its {error.budget} budget without completing the task.',
        caveats=f"{error.budget.capitalize()} budget exhausted. Check progress notes for partial work.",
    )


def entry_from_outcome(
    agent: str,
    *,
    reply: Message | None = None,
    completion: CompletionResult | None = None,
    error: BaseException | None = None,
    instance: str = "",
    max_iterations: int = 0,
) -> DelegateEntry:
    """Map how a child ended onto its entry (Shelly's outcome mapping)."""
    if isinstance(error, MaxIterationsExceeded | BudgetExhausted):
        if isinstance(error, BudgetExhausted):
            completion = budget_completion(agent, error)
        else:
            completion = exhausted_completion(instance or agent, max_iterations)
        return DelegateEntry(agent=agent, result=_result_text("", completion), completion=completion)
    if isinstance(error, RunCancelled):
        return DelegateEntry(agent=agent, error=str(error) if isinstance(error, SiblingFailed | DelegationClosed)
                             else TASK_CANCELED)
    if error is not None:
        return DelegateEntry(agent=agent, error=str(error) or type(error).__name__)
    text = reply.text_content() if reply is not None else ""
    return DelegateEntry(agent=agent, result=_result_text(text, completion) or None, completion=completion)


def board_status(entry: DelegateEntry) -> str:
    """The task-board status a finished child's task moves to: ``canceled`` only when the board
    or a failed sibling stopped it; any other error (an interactive child stopped by its
    delegation included, :data:`~.stops.DELEGATION_CLOSED`) is ``failed``."""
    if entry.error in (TASK_CANCELED, SIBLING_FAILED):
        return "canceled"
    if entry.error:
        return "failed"
    if entry.completion is not None:
        return entry.completion.status
    return "completed"
