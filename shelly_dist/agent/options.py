"""An agent's options: the knobs of its loop, kept apart from its collaborators."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from shelly_dist.agent.board import TaskBoardHook
from shelly_dist.agent.effects import Effect
from shelly_dist.agent.interaction import Answer
from shelly_dist.agent.limits import Budget
from shelly_dist.agent.middleware import Middleware
from shelly_dist.agent.prompt import SkillLike
from shelly_dist.agent.reflections import ReflectionStore
from shelly_dist.events import EventSink
from shelly_dist.models.context import ContextWindow
from shelly_dist.tools import Tool
from shelly_dist.tools.hooks import ToolHook


class ToolFilter(Protocol):
    """Decides which tools an agent sees at a depth (``shelly_dist.tools.policy.ToolPolicy``)."""

    def apply(self, tools: list[Tool], depth: int) -> list[Tool]: ...


@dataclass
class AgentOptions:
    """Options of one agent. ``0`` means unlimited for ``max_iterations``."""

    max_iterations: int = 0
    warn_iterations: int = 0
    """At iteration index ≥ this (when > 0), tell the model once that its budget is running out."""
    max_delegation_depth: int = 0
    """The agent may delegate while its depth is below this."""
    max_handoffs: int = 0
    """As a child: ``handoff`` is offered when above 0. As a parent: the chain limit of its
    delegations' handoffs (3 when not above 0). Shelly's meanings."""
    skills: Sequence[SkillLike] = ()
    hooks: list[Any] = field(default_factory=list)
    """Lifecycle hooks on the step machine (:mod:`shelly_dist.agent.hooks`): the built-ins of
    :mod:`shelly_dist.agent.middleware`, registered ``@hook`` classes, guardrails. Called in order."""
    middleware: list[Middleware] = field(default_factory=list)
    """The same as ``hooks`` (Shelly's name), called before them: ``timeout``, ``recovery``,
    ``logger``, ``output_guardrail`` are hooks now, so they hold on the pool and across resumes."""
    session: str = ""
    """The session the agent was built for (what hooks see as ``ctx.session``)."""
    context: str = ""
    """Project context for the ``<project_context>`` section."""
    delegate_fail_fast: bool = False
    """Cancel sibling children on the first failed entry (each says ``canceled: sibling failed``);
    not in an interactive ``delegate`` call."""
    behavioral_hints: bool = True
    tool_policy: ToolFilter | None = None
    tool_hooks: list[ToolHook] = field(default_factory=list)
    prompt_sections: Callable[[], Awaitable[list[str]]] | None = None
    """Extra prompt sections computed at the start of each run (the blackboard snapshot)."""
    interaction_mode: str = ""
    """Shelly's ``options.interaction_mode``: ``interactive`` lets this agent ``delegate`` with
    ``mode: interactive`` and answer its children with ``answer_delegation_questions``
    (:mod:`shelly_dist.agent.interactive`)."""
    question_timeout: float = 0.0
    """Seconds an interactive delegation waits for a child to ask or finish before cancelling it
    (Shelly's ``options.question_timeout``; 0: no limit)."""
    max_children: int = 5
    """Spawned children of one run running at once (``spawn``); one more is rejected, never queued."""
    spawn_timeout: float = 300.0
    """Seconds a spawned child may run; past it, it is cancelled and announced as failed."""
    request_input: Answer | None = None
    """Answers this child's ``request_input`` questions (``agent.interaction.ChildQuestion``); set
    by the runtime that spawned it, which offers the tool to delegated children only."""
    task_board: TaskBoardHook | None = None
    on_event: EventSink | None = None
    effects: Sequence[Effect] = ()
    """Per-iteration hooks around each model call (:mod:`shelly_dist.agent.effects`)."""
    reflections: ReflectionStore | None = None
    """Where notes of failed children go and are searched before delegating (None: no reflections)."""
    budget: Budget | None = None
    """The tree-limits ledger, this agent's own ``limits`` and its call estimates
    (:mod:`shelly_dist.agent.limits`); ``None``: no model call of the agent is ever reserved."""
    window: ContextWindow | None = None
    """The provider's context window and token ratio as this process knows them, shared with the
    provider that learns them (:mod:`shelly_dist.models.context`); ``None``: the effects' own
    ``context_window`` and Shelly's plain estimate."""
