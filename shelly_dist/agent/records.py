"""The serialisable records of a run: its state, its child requests and delegation entries.

Everything a run needs to continue on another machine is here, as pydantic models that dump to
JSON: the Celery runtime journals them in Redis, the in-process runtime keeps them in memory, and
the agent never knows which. The JSON shapes of :class:`DelegateEntry` and
:class:`CompletionResult` are Shelly's tool contract; keep their field names.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field

from shelly_dist.agent.limits.base import BudgetScope
from shelly_dist.chats import Message, ToolResult
from shelly_dist.models import Usage
from shelly_dist.models.suspend import ModelWait
from shelly_dist.observability import tracing


class CompletionResult(BaseModel):
    """What a child reports with ``task_complete``."""

    status: Literal["completed", "failed"]
    summary: str
    files_modified: list[str] | None = None
    tests_run: list[str] | None = None
    caveats: str | None = None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class PendingQuestion(BaseModel):
    """A child's ``request_input`` question as an interactive entry shows it (Shelly's
    ``Question``: ``{id, agent, content}``, ``agent`` being the child's instance name)."""

    id: str
    agent: str
    content: str


class DelegateEntry(BaseModel):
    """One element of ``delegate``'s output array; every field but ``agent`` is omitted when empty.

    In interactive delegation an entry is either a finished child's (``result``, ``completion``,
    ``error``, ``warning``) or a waiting child's (``delegation_id`` and ``pending_question``)."""

    agent: str
    result: str | None = None
    completion: CompletionResult | None = None
    error: str | None = None
    warning: str | None = None
    delegation_id: str | None = None
    pending_question: PendingQuestion | None = None
    reply_to: dict[str, str] | None = None
    """Where the answer to ``pending_question`` goes when the child waits in a journal (``run``,
    ``field``); never part of the tool result."""
    usage: Usage | None = None
    """What the finished child and everything it delegated spent (its run's ``tree_usage``), so
    the parent can total its own tree; journaled with the entry, never part of the tool result."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"agent": self.agent}
        if self.result:
            data["result"] = self.result
        if self.completion is not None:
            data["completion"] = self.completion.to_json()
        if self.error:
            data["error"] = self.error
        if self.warning:
            data["warning"] = self.warning
        if self.delegation_id:
            data["delegation_id"] = self.delegation_id
        if self.pending_question is not None:
            data["pending_question"] = self.pending_question.model_dump()
        return data

    def journal_json(self) -> dict[str, Any]:
        """:meth:`to_json` plus where the answer goes and what the child spent (what a child joins
        into its parent)."""
        data = self.to_json() | ({"reply_to": self.reply_to} if self.reply_to else {})
        return data | ({"usage": self.usage.model_dump()} if self.usage is not None else {})


class HandoffResult(BaseModel):
    """What a child reports with ``handoff`` (Shelly's field names)."""

    target_agent: str
    reason: str
    context: str


class ChildRequest(BaseModel):
    """A child run the parent waits for: one task of one ``delegate`` call.

    ``key`` (``<tool_call_id>:<index>``) is stable across redeliveries, so a runtime can derive an
    idempotent child run id from it.
    """

    key: str
    tool_call_id: str
    index: int
    agent: str
    task: str
    context: str = ""
    task_id: str | None = None
    depth: int
    visited: list[str]
    parent_run_id: str
    parent_agent: str
    fail_fast: bool = False
    """The parent's ``delegate_fail_fast``: a failure of this child stops its siblings."""
    scopes: list[BudgetScope] = Field(default_factory=list)
    """The tree limits the child inherits (its parent's scopes); journaled with the request."""
    max_handoffs: int = 0
    """The delegating agent's ``max_handoffs``: the chain limit of this delegation's handoffs."""
    handoffs: int = 0
    """Handoffs so far in this delegation's chain (0 for the child the parent asked for)."""
    handoff_to: str = ""
    """The peer agent this entry's task was handed off to (``agent`` stays the requested name,
    as in Shelly's entry); empty for the requested child itself."""
    reflections: str = ""
    """The ``<prior_reflections>`` message found for the task when the delegation was planned."""
    turn: bool = False
    """A team member's turn (:mod:`shelly_dist.agent.reactor`): its chat is kept for its next turn."""
    history: str = ""
    """The run whose chat this run continues: the same member's previous turn in its team."""
    spawn_timeout: float = 0.0
    """A spawned child's ``spawn_timeout`` (its parent's), for its error text."""
    spawn_deadline: float = 0.0
    """When a spawned child on the pool is out of time (epoch seconds; 0: no deadline)."""
    opening: str = ""
    """The peer's ``<handoff_context>`` message, which replaces the ``<delegation_context>``."""
    spent: Usage | None = None
    """What the agents earlier in this entry's handoff chain spent (with their subtrees): the
    peer's entry carries it on to the parent's tree total."""
    priority: str = "interactive"
    """The tree's priority at its providers (its root's: ``interactive`` or ``batch``), inherited."""
    share: str = ""
    """Who the tree shares its providers' keys with fairly (its root's batch, or its root run)."""
    path: list[str] = Field(default_factory=list)
    """The instance names from the root's agent down to the delegating one (``["lead"]``): the
    child's own path is this plus its name, which its decisions name (``lead → deployer-1``)."""
    delegation_id: str = ""
    """``d-N`` in interactive delegation: the child's ``request_input`` questions go to the parent's
    model (answered with ``answer_delegation_questions``); empty in blocking delegation."""
    watched: bool = False
    """A person watches the tree (its parent's ``RunState.watched``): the child's model calls
    stream their text as ``message_delta`` events (:mod:`shelly_dist.models.streaming`)."""
    trace: dict[str, str] = Field(default_factory=tracing.carrier)
    """The W3C trace context of the parent's ``execute_tool delegate`` span, taken when the request
    is built and journaled with it: the child's ``invoke_agent`` spans, on any worker and after
    any resume, are its children (empty without tracing)."""

    def entry_usage(self, state: RunState) -> Usage:
        """The usage the entry of this request's run carries: the run's tree and the handoff chain
        before it."""
        return state.tree_usage + (self.spent or Usage())

    def asks_parent(self) -> bool:
        """Whether this child's questions go to the parent's model: an interactive delegation's own
        child (a handoff's peer is auto-answered from the handoff context, as in Shelly)."""
        return bool(self.delegation_id) and self.handoffs == 0

    def spawned(self) -> str:
        """The agent that runs this request: the handoff's peer, else the requested agent."""
        return self.handoff_to or self.agent


class LiveDelegation(BaseModel):
    """An interactive child that asked and waits for its parent's answer (by ``delegation_id``)."""

    request: ChildRequest
    reply_to: dict[str, str] = Field(default_factory=dict)
    """Where its answer goes when it waits in a journal (the pool): ``run`` and ``field``."""


class PendingDelegation(BaseModel):
    """A ``delegate`` call waiting on its children; ``entries`` fill in input order."""

    tool_call_id: str
    entries: list[DelegateEntry | None]
    requests: list[ChildRequest]

    def missing(self) -> list[ChildRequest]:
        return [r for r in self.requests if self.entries[r.index] is None]


class Phase(StrEnum):
    """Where a run stands: next is a model call, or tool calls, or it waits, or it has ended."""

    MODEL = "model"
    TOOLS = "tools"
    SUSPENDED = "suspended"
    DONE = "done"
    FAILED = "failed"


class RunState(BaseModel):
    """The whole state of one run of one agent on one task.

    ``messages`` is filled only in snapshots (:meth:`Run.snapshot`); while a run is live, its
    agent's chat holds the messages.
    """

    run_id: str
    config_name: str
    instance_name: str
    depth: int = 0
    visited: list[str] = Field(default_factory=list)
    iteration: int = 0
    phase: Phase = Phase.MODEL
    warned: bool = False
    tool_results: dict[str, ToolResult] = Field(default_factory=dict)
    started: list[str] = Field(default_factory=list)
    """Tool call ids of the current reply whose tools began running (journaled before they run):
    after a crash, one of these without a result has an unknown outcome."""
    pending: list[PendingDelegation] = Field(default_factory=list)
    awaiting: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Tool calls of the current reply suspended until a runtime delivers their result (a
    :class:`~shelly_dist.tools.suspend.SuspendCall`'s payload by call id: ``ask_user`` on a worker,
    an approval of a gated call)."""
    approved: dict[str, str] = Field(default_factory=dict)
    """Gated tool calls of the current reply a person approved, by call id: the arguments to run
    them with when a person edited them, else "". Journaled before they run, like ``started``."""
    model_wait: ModelWait | None = None
    """The model call of the current step, suspended (:class:`~shelly_dist.models.suspend.SuspendModel`)
    until it is due or a reply is delivered for it (:meth:`Run.deliver_reply`)."""
    completion: CompletionResult | None = None
    delegations: dict[str, LiveDelegation] = Field(default_factory=dict)
    """Interactive children waiting for this run's ``answer_delegation_questions``, by id."""
    delegation_n: int = 0
    """The last ``d-N`` handed out by this run (Shelly numbers them per parent agent)."""
    questions_asked: int = 0
    """The last ``q-N`` of this run's ``request_input`` questions (numbered per child)."""
    handoff: HandoffResult | None = None
    """Set by ``handoff``: the run stops after this step and its delegation passes to the peer."""
    usage: Usage = Field(default_factory=Usage)
    children_usage: Usage = Field(default_factory=Usage)
    """What the children this run delegated to spent, each with its own subtree: the sum of their
    entries' ``usage`` as they were delivered."""
    hook_memory: dict[str, dict[str, int]] = Field(default_factory=dict)
    """What tool hooks remember across the run's calls (the loop detector's counts), journaled
    with every checkpoint so a run continued elsewhere keeps counting."""
    hooks: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Each lifecycle hook's memory (``ctx.state``), by hook name: journaled with the run, so a
    hook continued on another worker or after a suspension sees what it kept."""
    hooks_started: bool = False
    """``on_run_start`` (and the input guardrails) ran: they run once per run."""
    last_input_tokens: int = 0
    """The last model call's whole prompt as the server counted it (cached tokens included): the
    real size of the context, for effects."""
    token_ratio: float = 0.0
    """The server's tokens per estimated token as learned so far (0: unknown), journaled so that a
    worker continuing the run starts calibrated (:mod:`shelly_dist.models.context`)."""
    effects: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Each effect's memory, by slot (``<index>:<kind>``): journaled with the run."""
    priority: str = "interactive"
    """At its providers: ``interactive`` or ``batch``; a root's comes from where it started
    (``shelly batch``: batch), a child inherits its parent's (the provider governor serves
    ``interactive`` first)."""
    share: str = ""
    """Who the tree shares a provider key with fairly within its priority: the batch it belongs to,
    else its root run's id."""
    scopes: list[BudgetScope] = Field(default_factory=list)
    """The tree limits every model call of this run reserves against: inherited from the parent,
    plus the run's own when its agent has ``limits:``."""
    spawned: int = 0
    """How many ``spawn`` calls of this run were accepted (a run that spawned none finishes
    without asking its spawner whether to wait)."""
    announced: int = 0
    """How many announcements of spawned children this run has drained into its chat (its
    cursor in the spawner's list, journaled with the messages it appended)."""
    steered: int = 0
    """How many steering messages (``shelly steer``) this run has taken into its chat: its cursor
    in its inbox, journaled with the messages it appended (:mod:`shelly_dist.agent.steering`)."""
    path: list[str] = Field(default_factory=list)
    """The instance names of the agents above this run, from the root's down (its request's
    ``path``); empty for a root."""
    watched: bool = False
    """A person watches this run's tree (set at its root by :func:`~shelly_dist.models.streaming.watching`,
    inherited by every child on any worker): its model calls stream their text."""
    messages: list[Message] = Field(default_factory=list)

    @property
    def tree_usage(self) -> Usage:
        """What this run and every run it delegated (at any depth) spent, each token once."""
        return self.usage + self.children_usage


def child_run_id(parent_id: str, request: ChildRequest, iteration: int) -> str:
    """A child's run id, the same in both runtimes: deterministic, so a redelivered parent step
    names the same children again; it starts with the parent's id, hence with the root's (on the
    pool a hash tag on the root covers the whole tree)."""
    return keyed_run_id(parent_id, f"{iteration}:{request.key}")


def keyed_run_id(parent_id: str, step_key: str) -> str:
    """The run id of the child of ``parent_id`` asked for at ``<iteration>:<tool_call_id>:<index>``."""
    return f"{parent_id}-{hashlib.sha1(step_key.encode()).hexdigest()[:8]}"
