"""A run's setup: what a run is built with and from, before it takes a step.

The step machine (:mod:`shelly_dist.agent.run`) is cut by idea, each part a base of the next:
this module (the outcomes a step returns, the delegator and checkpoint a runtime hands in, how a
run starts, restores and rebuilds from a snapshot, prepares its tools and completer, emits its
events), :mod:`.run_delegating` (children's requests, their entries delivered back, interactive
answers) and :mod:`.run` (the steps: the model call, the tool calls, the end). A delegator and a
checkpoint read only what is here (the run's agent and state), so they are typed against
:class:`RunSetup`; the run they are handed is always the whole :class:`~shelly_dist.agent.run.Run`.
"""


from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Self

from shelly_dist import identity
from shelly_dist.agent import approval, steering
from shelly_dist.agent.completion import task_complete_tool
from shelly_dist.agent.delegation import child_messages
from shelly_dist.agent.effects import EffectChain
from shelly_dist.agent.handoff import handoff_tool
from shelly_dist.agent.hooks import HookChain
from shelly_dist.agent.interaction import request_input_tool
from shelly_dist.agent.interactive import INTERACTIVE, answer_tool
from shelly_dist.agent.limits import BudgetScope, LimitedCompleter
from shelly_dist.agent.orchestration import orchestration_toolbox
from shelly_dist.agent.records import (
    ChildRequest,
    CompletionResult,
    DelegateEntry,
    HandoffResult,
    LiveDelegation,
    Phase,
    RunState,
)
from shelly_dist.agent.spawn import Spawner, spawn_toolbox
from shelly_dist.chats import Message, Role, Text
from shelly_dist.errors import UsageError
from shelly_dist.events import Event
from shelly_dist.models import Completer, streaming
from shelly_dist.models.suspend import ModelWait
from shelly_dist.tools import Tool, ToolBox

if TYPE_CHECKING:
    from shelly_dist.agent.agent import Agent
    from shelly_dist.agent.registry import Registry


RESULT_CAP = 32_000
OUTCOME_UNKNOWN = "tool outcome unknown: the worker running it stopped"
"""The result of a tool call that began on a worker which then died, unless the tool is safe to
retry (:attr:`Tool.retry_on_crash`): running it again could repeat its effect."""
CAP_MARKER = "\n… [output capped — use targeted reads for remaining content]"
WARNING_TEXT = "You are approaching your iteration limit. Complete your current task and call task_complete."
EVENT_TEXT_LIMIT = 2_000


class Delegator(Protocol):
    """Runs the children of a ``delegate`` call.

    Return one entry per request, in order, when the children ran to the end; return ``None``
    when they were only dispatched (the run suspends and is fed with :meth:`Run.deliver`).
    """

    async def delegate(self, parent: RunSetup, requests: list[ChildRequest]) -> list[DelegateEntry] | None: ...

    async def answer(
        self, parent: RunSetup, delegations: list[LiveDelegation], answers: list[str]
    ) -> list[DelegateEntry] | None:
        """Interactive delegation: hand each answer to its waiting child; like :meth:`delegate`,
        return each one's next entry (a question again, or its end), or ``None`` to suspend."""
        ...

    async def close(self, parent: RunSetup) -> None:
        """The parent's run ended: cancel its interactive children still waiting for an answer."""
        ...


# A delegator may also offer ``async def wait_model(self, run: Run) -> None``: where a run whose model
# call is suspended (``Suspended.model``) waits in-process until it is due or its reply is delivered
# (the embedded runtime gives a limited run's slot back meanwhile; a coordinator watches Redis).
# Without it the run waits with :meth:`Run.wait_model_here`.


Checkpoint = Callable[["RunSetup", str], Awaitable[None]]
"""Called after the reply is appended (``"reply"``), before tools that are not safe to retry begin
(``"started"``: ``RunState.started`` names them), after each tool result while other calls of the
reply still run (``"tool"``), when the run suspends (``"suspended"``), after the tool results are
appended (``"tools"``), and when an effect rewrote the chat before a model call (``"rewrite"``: the
journal must then hold the whole chat again, not only what was appended)."""


@dataclass(frozen=True)
class Continue:
    """The step finished; call ``step`` again."""


@dataclass(frozen=True)
class Suspended:
    """The run waits for these children, or for its model call (``model``: it was suspended)."""

    requests: list[ChildRequest]
    model: ModelWait | None = None


@dataclass(frozen=True)
class Finished:
    """The run is over: ``reply`` is the final assistant message."""

    reply: Message
    completion: CompletionResult | None = None


StepOutcome = Continue | Suspended | Finished


def cap_result(content: str) -> str:
    """Cut a result (success or error) longer than 32,000 characters and mark it."""
    return content if len(content) <= RESULT_CAP else content[:RESULT_CAP] + CAP_MARKER


class _EndingSlots:
    """What a run's ending tools (``task_complete``, ``handoff``, ``request_input``) read and write:
    the run's state, not the run. Handlers bound to the run would close a reference cycle (run →
    tools → handler → run), so every finished run — agent, chat and tools with it — would wait for
    the cyclic garbage collector instead of being freed at once; with 200 children in flight those
    cycles were a third of the embedded runtime's CPU (gen-2 collections of ~40k objects)."""

    __slots__ = ("state",)

    def __init__(self, state: RunState) -> None:
        self.state = state

    def get_completion(self) -> CompletionResult | None:
        return self.state.completion

    def set_completion(self, result: CompletionResult) -> None:
        self.state.completion = result

    def next_question(self) -> int:
        self.state.questions_asked += 1
        return self.state.questions_asked

    def get_handoff(self) -> HandoffResult | None:
        return self.state.handoff

    def set_handoff(self, result: HandoffResult) -> None:
        self.state.handoff = result


class RunSetup:
    """A run as built: its agent, state, delegator and checkpoint, its tools and completer
    prepared; the part of a run a delegator and a checkpoint read."""

    def __init__(
        self,
        agent: Agent,
        state: RunState,
        *,
        delegator: Delegator | None = None,
        checkpoint: Checkpoint | None = None,
        before_model: Callable[[RunSetup], Awaitable[None]] | None = None,
    ) -> None:
        self.agent = agent
        self.state = state
        self.delegator = delegator
        self.checkpoint = checkpoint
        self.before_model = before_model
        self._prepared = False
        self._running = 0
        self._tools: list[Tool] = []
        self._by_name: dict[str, Tool] = {}
        self._delegate: Tool | None = None
        self._answer: Tool | None = None
        self._effects = EffectChain()
        self._estimate = 0
        self._completer: Completer = agent.completer
        self._hooks = HookChain([*agent.options.middleware, *agent.options.hooks])
        self._gated: set[str] = set()
        self.inbox: steering.Inbox | None = agent.options.inbox
        """Where this run's steering messages wait (:mod:`shelly_dist.agent.steering`): the
        engine's in-process inbox embedded; a runtime that keeps them elsewhere replaces it."""
        self._replied: asyncio.Event | None = None
        """Set when a reply is delivered for the model call this run waits for in-process."""

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        agent: Agent,
        messages: list[Message] | None = None,
        *,
        run_id: str | None = None,
        visited: list[str] | None = None,
        scopes: list[BudgetScope] | None = None,
        priority: str | None = None,
        share: str | None = None,
        path: list[str] | None = None,
        watched: bool | None = None,
        **kwargs: object,
    ) -> Self:
        """A fresh run of ``agent`` over its chat, after appending ``messages``; ``scopes`` are the
        tree limits it inherits, ``path`` the instance names of the agents above it, ``priority``
        and ``share`` its place at its providers (a root's default: the context's,
        :func:`shelly_dist.identity.priority`; its share: itself); ``watched`` whether a person
        watches its tree (default: whether it starts inside :func:`~shelly_dist.models.streaming.watching`)."""
        if messages:
            agent.chat.append(*messages)
        rid = run_id or uuid.uuid4().hex[:12]
        state = RunState(
            run_id=rid,
            config_name=agent.config_name,
            instance_name=agent.name,
            depth=agent.depth,
            visited=visited or [agent.config_name],
            scopes=list(scopes or []),
            priority=priority or identity.priority(),
            share=share or identity.share() or rid,
            path=list(path or []),
            watched=streaming.watched() if watched is None else watched,
        )
        return cls(agent, state, **kwargs)  # type: ignore[arg-type]

    @classmethod
    def start_child(cls, agent: Agent, request: ChildRequest, *, history: list[Message] | None = None,
                    **kwargs: object) -> Self:
        """The run of a delegated child: its context and task, the parent's chain of agents and
        the parent's tree limits (every runtime starts a child through here). ``history``: the
        chat of the run it continues (a team member's previous turn), before its new task."""
        earlier = [m for m in history or [] if m.role != Role.SYSTEM]
        return cls.start(agent, [*earlier, *child_messages(request)], visited=request.visited,
                         scopes=request.scopes, priority=request.priority, share=request.share or None,
                         path=request.path, watched=request.watched, **kwargs)  # type: ignore[arg-type]

    @classmethod
    def restore(cls, agent: Agent, snapshot: RunState, **kwargs: object) -> Self:
        """Continue a run from a snapshot on a freshly spawned ``agent`` of the same config.

        The snapshot's messages replace the agent's chat; its instance name and depth are restored.
        """
        if agent.config_name != snapshot.config_name:
            raise UsageError(
                f"run {snapshot.run_id}: snapshot is of agent {snapshot.config_name!r}, not {agent.config_name!r}"
            )
        agent.name = snapshot.instance_name
        agent.depth = snapshot.depth
        agent.chat.replace_all(*snapshot.messages)
        state = snapshot.model_copy(deep=True, update={"messages": []})
        return cls(agent, state, **kwargs)  # type: ignore[arg-type]

    @classmethod
    def rebuild(cls, registry: Registry, snapshot: RunState, **kwargs: object) -> Self:
        """Spawn the snapshot's agent from ``registry`` and continue its run (any process)."""
        return cls.restore(registry.spawn(snapshot.config_name, snapshot.depth), snapshot, **kwargs)

    def snapshot(self) -> RunState:
        """The whole state with its messages: a deep copy, safe to serialise."""
        return self.state.model_copy(deep=True, update={"messages": self.agent.chat.messages()})

    # -- tools and prompt ---------------------------------------------------------------------

    async def _prepare(self) -> None:
        """Collect the tools and rebuild the system prompt (on every run, as Shelly's ``Init``)."""
        agent = self.agent
        boxes: list[ToolBox] = list(agent.toolboxes)
        if agent.can_delegate() and agent.registry is not None:
            orch = orchestration_toolbox(agent.registry, agent.config_name)
            self._delegate = orch.get("delegate")
            if agent.options.interaction_mode == INTERACTIVE:
                self._answer = answer_tool()
                orch.register(self._answer)
            boxes.append(orch)
            if self.spawner is not None:
                boxes.append(spawn_toolbox(self, self.spawner))
        if agent.depth > 0:
            slots = _EndingSlots(self.state)
            ending = [task_complete_tool(slots.get_completion, slots.set_completion)]
            if agent.registry is not None and agent.options.max_handoffs > 0:
                ending.append(handoff_tool(slots.get_handoff, slots.set_handoff))
            if agent.options.request_input is not None:
                ending.append(request_input_tool(lambda: agent.name, agent.options.request_input,
                                                 slots.next_question))
            boxes.append(ToolBox(ending, name="completion"))
        if (attach := getattr(self.inbox, "attach", None)) is not None:
            attach(self)  # steerable from now on (the in-process inbox lists its live runs)
        self._effects = EffectChain(agent.options.effects)
        boxes.extend(self._effects.provided_toolboxes())
        if agent.options.window is not None:
            agent.options.window.seed(self.state.token_ratio)
        self._completer = self._limited_completer()
        seen: dict[str, Tool] = {}
        box_of: dict[str, str] = {}
        for box in boxes:
            for tool in box:
                seen.setdefault(tool.name, tool)
                box_of.setdefault(tool.name, box.name)
        tools = list(seen.values())
        if agent.options.tool_policy is not None:
            tools = agent.options.tool_policy.apply(tools, agent.depth)
        gate = agent.options.approval or approval.ApprovalPolicy()  # after the policy: only offered tools
        self._gated = {t.name for t in tools if gate.gates(t, box_of.get(t.name, ""))}
        self._tools = tools
        self._by_name = {t.name: t for t in tools}
        extra = await agent.options.prompt_sections() if agent.options.prompt_sections else []
        shared, own = agent.system_prompt_parts(extra_sections=extra, has_notes="list_notes" in self._by_name)
        system = Message(sender=agent.name, role=Role.SYSTEM, parts=[Text(text=t) for t in (shared, own) if t])
        first = agent.chat.view()[:1]
        if first and first[0].role == Role.SYSTEM:
            agent.chat.replace(0, system)
        else:
            agent.chat.insert(0, system)
        self._prepared = True

    def _limited_completer(self) -> Completer:
        """The agent's completer, behind the tree-limits gate when the run carries any scope. An
        agent with ``limits:`` opens its own scope (the run's id) on top of those it inherited;
        being in the run's state, the scope is journaled with it and survives any rebuild."""
        budget, state = self.agent.options.budget, self.state
        if budget is None:
            return self.agent.completer
        if budget.limits is not None and budget.limits.any() and all(s.id != state.run_id for s in state.scopes):
            state.scopes.append(BudgetScope(id=state.run_id, limits=budget.limits))
        if not state.scopes:
            return self.agent.completer
        return LimitedCompleter(self.agent.completer, budget, state.scopes, agent=self.agent.name)

    @property
    def spawner(self) -> Spawner | None:
        """Where this run's ``spawn`` children go: its delegator's spawner, if it has one."""
        return getattr(self.delegator, "spawner", None)

    def steerable_at_end(self) -> bool:
        """Whether a steering message that arrived during the run's last model call reopens it: a
        run that ended with its plain reply takes another step; one that ended with
        ``task_complete`` or ``handoff`` has reported and stays ended."""
        return self.inbox is not None and self.state.completion is None and self.state.handoff is None

    def reopen(self) -> None:
        """A run that would have finished takes another step instead (announcements of spawned
        children wait for it): its final reply stays in the chat, the model is asked again."""
        self.state.phase = Phase.MODEL

    @property
    def tools(self) -> list[Tool]:
        return list(self._tools)

    # -- events -------------------------------------------------------------------------------

    def emit(self, kind: str, **data: object) -> None:
        sink = self.agent.options.on_event
        if sink is not None:
            sink(Event(kind=kind, agent=self.agent.name, run_id=self.state.run_id, data=dict(data)))

    async def _checkpoint(self, reason: str) -> None:
        if self.checkpoint is not None:
            await self.checkpoint(self, reason)

    async def _result_recorded(self) -> None:
        """Journal a tool result while other calls of the step still run. The last one needs no
        checkpoint of its own: the step's next checkpoint ("tools" or "suspended") follows with no
        await in between and holds it too, atomically with the appended tool messages."""
        self._running -= 1
        if self._running > 0:
            await self._checkpoint("tool")

    def _reply(self) -> Message:
        for m in reversed(self.agent.chat.view()):
            if m.role == Role.ASSISTANT:
                return m
        raise UsageError(f"run {self.state.run_id}: no assistant reply to run tools for")
