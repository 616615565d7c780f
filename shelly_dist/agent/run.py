"""One run of one agent on one task, as a step machine.

A step is one model call and the tool calls of its reply. ``step()`` advances exactly one phase
and says what happened: :class:`Continue` (call ``step`` again), :class:`Suspended` (children must
run before the tool results can be appended) or :class:`Finished`. All of the run's state is in
:class:`RunState`, so a runtime can snapshot it to JSON between any two steps — or at the
checkpoints inside one (after the reply, after each tool result) — and continue it elsewhere:

* a reply already in the chat is never asked of the model again (phase ``tools`` skips the call);
* a tool whose result is in ``tool_results`` is never run again;
* a ``delegate`` call becomes :class:`ChildRequest` records. With a delegator that answers at once
  (in-process), the children run concurrently with the other tools of the reply, as in Shelly;
  with none, or one that returns ``None``, the run suspends until :meth:`deliver` fills every entry.

The loop's contract is Shelly's: the completer never appends; tool calls run concurrently and
their results are appended in call order, one tool message each; unknown tools and handler errors
become ``is_error`` results; results over 32,000 characters are cut, errors as well as successes
(an error carrying a megabyte of output would otherwise flood the chat); the iteration limit is a
distinct error.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import shelly_dist.agent.reflections as reflections
from shelly_dist import events, identity
from shelly_dist.agent import approval, steering
from shelly_dist.agent.completion import task_complete_tool
from shelly_dist.agent.delegation import child_messages, format_entries, plan_children
from shelly_dist.agent.deltas import RunDeltas
from shelly_dist.agent.effects import EffectChain, EffectPhase, IterationContext, estimate_tokens
from shelly_dist.agent.handoff import handoff_tool
from shelly_dist.agent.hooks import HookChain
from shelly_dist.agent.interaction import request_input_tool
from shelly_dist.agent.interactive import INTERACTIVE, answer_tool, answered, parse_answers, settle
from shelly_dist.agent.limits import BudgetScope, LimitedCompleter
from shelly_dist.agent.orchestration import orchestration_toolbox
from shelly_dist.agent.overflow import complete_or_shrink
from shelly_dist.agent.records import (
    ChildRequest,
    CompletionResult,
    DelegateEntry,
    HandoffResult,
    LiveDelegation,
    PendingDelegation,
    Phase,
    RunState,
)
from shelly_dist.agent.spawn import Spawner, drain, spawn_toolbox
from shelly_dist.cancellation import raise_if_cancelled
from shelly_dist.chats import Message, Role, Text, ToolCall, ToolResult
from shelly_dist.chats.replies import STOP_REASON, argument_problem, parse_arguments, truncated
from shelly_dist.errors import AgentError, DelegationRejected, MaxIterationsExceeded, UsageError
from shelly_dist.events import REPLY_TRUNCATED, Event
from shelly_dist.identity import acting_as
from shelly_dist.models import Completer, Usage, streaming
from shelly_dist.models.speed import SPEED
from shelly_dist.models.suspend import ModelCall, ModelWait, SuspendModel, calling_model, raise_if_failed
from shelly_dist.observability import metrics, tracing
from shelly_dist.tools import Tool, ToolBox
from shelly_dist.tools.decisions import Verdict, edited_note
from shelly_dist.tools.hooks import bind_run_memory
from shelly_dist.tools.suspend import SuspendCall

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

    async def delegate(self, parent: Run, requests: list[ChildRequest]) -> list[DelegateEntry] | None: ...

    async def answer(
        self, parent: Run, delegations: list[LiveDelegation], answers: list[str]
    ) -> list[DelegateEntry] | None:
        """Interactive delegation: hand each answer to its waiting child; like :meth:`delegate`,
        return each one's next entry (a question again, or its end), or ``None`` to suspend."""
        ...

    async def close(self, parent: Run) -> None:
        """The parent's run ended: cancel its interactive children still waiting for an answer."""
        ...


# A delegator may also offer ``async def wait_model(self, run: Run) -> None``: where a run whose model
# call is suspended (``Suspended.model``) waits in-process until it is due or its reply is delivered
# (the embedded runtime gives a limited run's slot back meanwhile; a coordinator watches Redis).
# Without it the run waits with :meth:`Run.wait_model_here`.


Checkpoint = Callable[["Run", str], Awaitable[None]]
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


class Run:
    """Drives one agent's loop over its chat. Not safe for two tasks to step at once."""

    def __init__(
        self,
        agent: Agent,
        state: RunState,
        *,
        delegator: Delegator | None = None,
        checkpoint: Checkpoint | None = None,
        before_model: Callable[[Run], Awaitable[None]] | None = None,
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
    ) -> Run:
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
                    **kwargs: object) -> Run:
        """The run of a delegated child: its context and task, the parent's chain of agents and
        the parent's tree limits (every runtime starts a child through here). ``history``: the
        chat of the run it continues (a team member's previous turn), before its new task."""
        earlier = [m for m in history or [] if m.role != Role.SYSTEM]
        return cls.start(agent, [*earlier, *child_messages(request)], visited=request.visited,
                         scopes=request.scopes, priority=request.priority, share=request.share or None,
                         path=request.path, watched=request.watched, **kwargs)  # type: ignore[arg-type]

    @classmethod
    def restore(cls, agent: Agent, snapshot: RunState, **kwargs: object) -> Run:
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
    def rebuild(cls, registry: Registry, snapshot: RunState, **kwargs: object) -> Run:
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

    # -- the step machine ---------------------------------------------------------------------

    async def step(self) -> StepOutcome:
        """Advance one phase. Raises the model's error, ``MaxIterationsExceeded``, or a hook's
        ``AgentError``; cancellation propagates."""
        if not self._prepared:
            await self._prepare()
        with acting_as(self.agent.name, run=self.state.run_id, path=[*self.state.path, self.agent.name],
                       priority=self.state.priority, share=self.state.share), \
                bind_run_memory(self.state.hook_memory):
            if not self._hooks:
                return await self._advance()
            try:
                async with self._hooks.deadline(self):
                    if not self.state.hooks_started and self.state.phase == Phase.MODEL:
                        await self._hooks.run_start(self)
                        self.state.hooks_started = True
                    return await self._advance()
            except Exception as exc:
                error = await self._hooks.run_error(self, exc)
                if error is exc:
                    raise
                raise error from exc

    async def _advance(self) -> StepOutcome:
        """One phase of the step machine (see :meth:`step`)."""
        phase = self.state.phase
        if phase == Phase.MODEL:
            return await self._model_step()
        if phase == Phase.TOOLS:
            return await self._tools_step()
        if phase == Phase.SUSPENDED:
            if self.missing():
                raise UsageError(f"run {self.state.run_id}: still waiting on {len(self.missing())} children")
            if self.state.awaiting:
                raise UsageError(f"run {self.state.run_id}: still waiting on {len(self.state.awaiting)} tool calls")
            return await self._tools_step()  # approved calls run now; with none left, the results are appended
        if phase == Phase.DONE:  # finished and journaled, but its finish was not: finish again
            return Finished(self._reply(), self.state.completion)
        raise UsageError(f"run {self.state.run_id}: already {phase.value}")

    async def until_done(self) -> Message:
        """Step until the run finishes; a suspension with no delegator is a ``UsageError``."""
        while True:
            outcome = await self.step()
            if isinstance(outcome, Finished):
                if self.steerable_at_end() and await steering.waiting_at_end(self, self.inbox):  # type: ignore[arg-type]
                    self.reopen()  # a person spoke during the last call: the model hears it
                    continue
                if self.state.spawned and self.spawner is not None and await self.spawner.wait(self):
                    self.reopen()  # a spawned child ended: its announcement is the next step's input
                    continue
                return outcome.reply
            if isinstance(outcome, Suspended):
                if outcome.model is not None:  # embedded (or a coordinator's own run): it waits here
                    wait = getattr(self.delegator, "wait_model", None)
                    await (wait(self) if wait is not None else self.wait_model_here())
                    continue
                raise UsageError(
                    f"run {self.state.run_id}: suspended on {len(outcome.requests)} children and nobody runs them"
                )

    async def _model_step(self) -> StepOutcome:
        agent, state, opts = self.agent, self.state, self.agent.options
        wait = state.model_wait
        if wait is not None and wait.reply is not None:  # delivered: the call's answer, nothing is asked
            state.model_wait = None
            delivered = Message.model_validate(wait.reply)
            raise_if_failed(delivered)  # the call failed where it was made: the run fails as if here
            return await self._replied_with(delivered, delivered=True)
        if wait is None:  # a new call (a call whose wait is due was prepared before it suspended)
            if opts.max_iterations > 0 and state.iteration >= opts.max_iterations:
                state.phase = Phase.FAILED
                raise MaxIterationsExceeded(agent=agent.name)
            if opts.warn_iterations > 0 and state.iteration >= opts.warn_iterations and not state.warned:
                agent.chat.append(Message.text("shelly", Role.USER, WARNING_TEXT))
                state.warned = True
        if self.before_model is not None:
            await self.before_model(self)
        if wait is None:
            if self.state.spawned and self.spawner is not None:  # a run that spawned nothing costs no read
                await drain(self, self.spawner)
            if self.inbox is not None:  # a person's steering joins before the call, journaled with its reply
                await steering.drain(self, self.inbox)
            tools = await self._effects_before()
            if self._hooks:
                await self._hooks.before_model(self)
        else:
            tools = self._offered_tools()
        raise_if_cancelled()  # a cancel swallowed under a hook or a journal write asks no model
        state.model_wait = None
        try:
            with calling_model(ModelCall(can_suspend=True, previous=wait)), \
                    streaming.streaming_to(RunDeltas(self.emit) if state.watched and opts.on_event else None):
                raw = await complete_or_shrink(
                    self._completer, agent.chat, tools, agent_name=agent.name, effects=self._effects,
                    states=state.effects, context=self._iteration_context, window=opts.window,
                    checkpoint=lambda: self._checkpoint("rewrite"), emit=self.emit,
                )
        except SuspendModel as signal:
            return await self._suspend_model(ModelWait.of(signal, state.run_id, state.iteration, wait))
        except Exception as exc:  # calls made before the failure (a team coordinator's) still count
            spent = getattr(exc, "usage", None)
            if isinstance(spent, Usage) and spent.total_tokens:
                spent = spent.model_copy(update={"model_requests": 1})  # one step's call, as a reply's
                state.usage = state.usage + spent
                agent.usage.add(spent)
            raise
        return await self._replied_with(raw)

    async def _suspend_model(self, wait: ModelWait) -> StepOutcome:
        """Journal the suspended model call and let the run wait for it (see
        :mod:`shelly_dist.models.suspend`); the phase stays ``model``."""
        self.state.model_wait = wait
        self.emit(events.MODEL_WAITING, wait=wait.kind, reason=wait.reason, due_at=wait.due_at)
        await self._checkpoint("suspended")
        return Suspended([], model=wait)

    def model_waiting(self) -> bool:
        """Whether the run waits for its model call: suspended, no reply delivered, not due yet."""
        wait = self.state.model_wait
        return wait is not None and not wait.over()

    def deliver_reply(self, wait_id: str, reply: Message) -> bool:
        """Deliver the answer of the suspended model call ``wait_id`` (its usage, priced, in its
        metadata, as :class:`~shelly_dist.models.Usage.attach` puts it). Idempotent: a second
        delivery, or one for a wait that is not the run's current one, is ignored (False)."""
        wait = self.state.model_wait
        if wait is None or wait.id != wait_id or wait.reply is not None:
            return False
        wait.reply = reply.model_dump(mode="json")
        if self._replied is not None:
            self._replied.set()
        return True

    async def wait_model_here(self) -> None:
        """Wait in this process until the suspended model call is due or a reply is delivered for
        it (:meth:`deliver_reply`, from another task). Cancellation ends the wait."""
        while (wait := self.state.model_wait) is not None and not wait.over():
            self._replied = self._replied or asyncio.Event()
            self._replied.clear()
            timeout = None if wait.due_at is None else max(0.0, wait.due_at - time.time())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._replied.wait()

    async def _replied_with(self, raw: Message, *, delivered: bool = False) -> StepOutcome:
        """The model's answer ``raw`` (asked now, or delivered for a suspended call) joins the run:
        hooks, the chat, usage, effects, then the reply's tools or the run's end."""
        agent, state, opts = self.agent, self.state, self.agent.options
        if delivered:  # no completer saw it: the tree limits are charged here
            record = getattr(self._completer, "record_delivered", None)
            if record is not None:
                await record(Usage.of(raw))
        reply = raw
        if self._hooks:  # a reply a hook replaces still counts the model call's usage (``raw``)
            reply = await self._hooks.after_model(self, reply)
            if not reply.tool_calls():
                reply = await self._hooks.run_end(self, reply)
        reply.sender = agent.name
        reply.role = Role.ASSISTANT
        agent.chat.append(reply)
        state.iteration += 1
        usage = Usage.of(raw)
        usage.model_requests = 1
        state.usage = state.usage + usage
        state.last_input_tokens = usage.input_tokens + usage.cache_read_tokens + usage.cache_creation_tokens
        if opts.window is not None:
            state.token_ratio = opts.window.ratio
        agent.usage.add(usage)
        metrics.agent_usage(agent.config_name or agent.name, usage.total_tokens, usage.cost_usd)
        if self._effects:
            await self._effects.run(EffectPhase.AFTER_COMPLETE, self._iteration_context, state.effects)
        calls = reply.tool_calls()
        if truncated(reply):
            self._refuse_truncated(reply, calls)
        self.emit(
            events.MESSAGE_ADDED,
            role="assistant",
            text=reply.text_content()[:EVENT_TEXT_LIMIT],
            tool_calls=[c.name for c in calls],
            usage=usage.model_dump(),
            **({"speed": raw.metadata[SPEED]} if SPEED in raw.metadata else {}),
        )
        if not calls:
            state.phase = Phase.DONE
            await self._checkpoint("reply")
            return Finished(reply, state.completion)
        state.phase = Phase.TOOLS
        await self._checkpoint("reply")
        return await self._tools_step()

    def _refuse_truncated(self, reply: Message, calls: list[ToolCall]) -> None:
        """A reply the output limit cut is named (a ``warning`` event), and its tool calls whose
        arguments are not a whole JSON object — the one the limit cut — are never executed: each
        gets an error result instead. The calls before it are complete and run as usual (a reply
        cut while writing its fourth ``get_weather`` call still runs the first three)."""
        reason = str(reply.metadata.get(STOP_REASON))
        cut = [c for c in calls if not c.arguments.strip() or parse_arguments(c.arguments) is None]
        self.emit(events.WARNING, code=REPLY_TRUNCATED, stop_reason=reason, tool_calls=[c.name for c in cut],
                  message=f"the reply was cut at the output limit (stop reason {reason!r})"
                  + (f"; {len(cut)} cut tool call(s) not executed" if cut else "")
                  + (f"; {len(calls) - len(cut)} complete call(s) run" if len(calls) > len(cut) else ""))
        for call in cut:
            self.state.tool_results[call.id] = ToolResult(
                tool_call_id=call.id, is_error=True,
                content=f"{call.name} not executed: your reply was cut at the output limit (stop reason "
                        f"{reason!r}), so its arguments are incomplete; send a shorter call",
            )

    def _iteration_context(self, slot: dict[str, Any]) -> IterationContext:
        agent, state = self.agent, self.state
        return IterationContext(
            phase=EffectPhase.BEFORE_COMPLETE, iteration=state.iteration, chat=agent.chat, completer=self._completer,
            agent_name=agent.name, usage=state.usage,
            last_usage=Usage(input_tokens=state.last_input_tokens) if state.iteration else None,
            estimated_tokens=self._estimate, state=slot, has_tool=self._by_name.__contains__,
            context_window=agent.options.window.effective if agent.options.window is not None else 0,
            token_ratio=agent.options.window.ratio if agent.options.window is not None else 0.0,
        )

    async def _effects_before(self) -> list[Tool]:
        """Run the effects due before the model call; the tools the call is offered. A chat the
        effects rewrote (compaction) is checkpointed at once, so a crash never loses it."""
        if not self._effects:
            return list(self._tools)
        window, view = self.agent.options.window, self.agent.chat.view()
        if window is not None:
            await window.prepare(view, self._tools)
        raw = estimate_tokens(view, self._tools)
        self._estimate = window.estimate(raw) if window is not None else raw
        rewrites = self.agent.chat.rewrites
        await self._effects.run(EffectPhase.BEFORE_COMPLETE, self._iteration_context, self.state.effects)
        if self.agent.chat.rewrites != rewrites:
            # The size the provider reported for the last call no longer describes the chat: a run
            # that dies before its next reply must not compact the compacted chat again.
            self.state.last_input_tokens = 0
            await self._checkpoint("rewrite")
        return self._effects.filter_tools(self._iteration_context, self.state.effects, list(self._tools))

    def _offered_tools(self) -> list[Tool]:
        """The tools the model call is offered, as :meth:`_effects_before` chose them, without
        running the effects again (a suspended call asked again: they ran before it suspended)."""
        if not self._effects:
            return list(self._tools)
        self._estimate = estimate_tokens(self.agent.chat.view(), self._tools)
        return self._effects.filter_tools(self._iteration_context, self.state.effects, list(self._tools))

    def _reply(self) -> Message:
        for m in reversed(self.agent.chat.view()):
            if m.role == Role.ASSISTANT:
                return m
        raise UsageError(f"run {self.state.run_id}: no assistant reply to run tools for")

    def missing(self) -> list[ChildRequest]:
        """Children whose entries have not been delivered yet."""
        return [r for p in self.state.pending for r in p.missing()]

    def waiting(self) -> bool:
        """Whether the run still waits: on children, or on suspended tool calls' results."""
        return bool(self.missing() or self.state.awaiting)

    async def _tools_step(self) -> StepOutcome:
        calls = self._reply().tool_calls()
        waiting = {p.tool_call_id for p in self.state.pending}
        waiting |= set(self.state.awaiting)
        todo = [c for c in calls if c.id not in self.state.tool_results and c.id not in waiting]
        if self.inbox is not None:  # steer --interrupt: no call of this step starts
            todo = await steering.interrupt(self, self.inbox, todo)
        if self._gated:  # the gate: after the policy, before the ledger
            opts = self.agent.options
            await approval.screen(self, todo, self._gated, opts.decider,
                                  opts.approval.timeout if opts.approval is not None else 0.0)
            todo = [c for c in todo if c.id not in self.state.tool_results and c.id not in self.state.awaiting]
        await self._journal_started(todo)
        raise_if_cancelled()  # a cancel swallowed by that checkpoint's write starts no tool
        jobs = []
        for call in todo:
            tool = self._by_name.get(call.name)
            if tool is not None and tool is self._delegate:
                jobs.append(self._delegate_call(call))
            elif tool is not None and tool is self._answer:
                jobs.append(self._answer_call(call))
            else:
                jobs.append(self._tool_call(call, tool))
        self._running = len(jobs)
        await asyncio.gather(*(tracing.execute_tool(c.name, c.id, job, self.state.tool_results)
                               for c, job in zip(todo, jobs, strict=True)))
        missing = self.missing()
        if missing or self.state.awaiting:
            self.state.phase = Phase.SUSPENDED
            await self._checkpoint("suspended")
            return Suspended(missing)
        return await self._finish_tools()

    async def _journal_started(self, todo: list[ToolCall]) -> None:
        """Record which tool calls begin, before they run (one checkpoint, only when a tool is not
        safe to retry). A call already marked started by an earlier attempt whose tool is not safe
        to retry gets :data:`OUTCOME_UNKNOWN` instead of running a second time."""
        state, unsafe = self.state, []
        for call in todo:
            tool = self._by_name.get(call.name)
            if tool is None or tool is self._delegate or tool is self._answer or tool.retry_on_crash:
                continue
            if call.id in state.started:
                state.tool_results[call.id] = ToolResult(tool_call_id=call.id, content=OUTCOME_UNKNOWN, is_error=True)
                self.emit(events.TOOL_CALL_END, tool=call.name, call_id=call.id, is_error=True)
            else:
                unsafe.append(call.id)
        todo[:] = [c for c in todo if c.id not in state.tool_results]
        if unsafe:
            state.started = [*state.started, *unsafe]
            await self._checkpoint("started")

    async def _tool_call(self, call: ToolCall, tool: Tool | None) -> None:
        started = time.monotonic()
        self.emit(events.TOOL_CALL_START, tool=call.name, call_id=call.id, arguments=call.arguments[:500])
        result = await self._hooks.before_tool(self, call) if self._hooks else None
        hooks = self.agent.options.tool_hooks
        for hook in hooks if result is None else ():
            result = await hook.before_tool(call)
            if result is not None:
                break
        if result is None:
            try:
                result = await self._invoke(call, tool)
            except SuspendCall as suspend:  # journaled with the suspension; the result comes later
                self.state.awaiting[call.id] = {"kind": suspend.kind, "tool": call.name, **suspend.payload}
                self._running -= 1
                return
        for hook in hooks:
            try:
                result = await hook.after_tool(call, result)
            except AgentError:
                raise
            except Exception as exc:
                result = ToolResult(tool_call_id=call.id, content=str(exc), is_error=True)
        if self._hooks:
            result = await self._hooks.after_tool(self, call, result)
        self.state.tool_results[call.id] = result
        self.emit(
            events.TOOL_CALL_END,
            tool=call.name,
            call_id=call.id,
            is_error=result.is_error,
            duration=round(time.monotonic() - started, 4),
        )
        await self._result_recorded()

    async def _invoke(self, call: ToolCall, tool: Tool | None) -> ToolResult:
        if tool is None:
            return ToolResult(tool_call_id=call.id, content=f"tool not found: {call.name}", is_error=True)
        problem = argument_problem(call.name, call.arguments)
        if problem is not None:
            return ToolResult(tool_call_id=call.id, content=problem, is_error=True)
        raise_if_cancelled()  # nor in the tool's own task
        edited = self.state.approved.get(call.id)  # a person approved it with other arguments
        note = edited_note(edited) if edited else ""
        try:
            content = await tool.handler(edited or call.arguments)
        except (asyncio.CancelledError, SuspendCall):
            raise
        except Exception as exc:
            return ToolResult(tool_call_id=call.id, content=note + cap_result(str(exc) or type(exc).__name__),
                              is_error=True)
        return ToolResult(tool_call_id=call.id, content=note + cap_result(content))

    async def _delegate_call(self, call: ToolCall) -> None:
        agent, state = self.agent, self.state
        self.emit(events.TOOL_CALL_START, tool=call.name, call_id=call.id, arguments=call.arguments[:500])
        try:
            entries, requests, interactive = plan_children(
                call_id=call.id,
                arguments=call.arguments,
                registry=agent.registry,
                config_name=agent.config_name,
                instance_name=agent.name,
                depth=agent.depth,
                max_depth=agent.options.max_delegation_depth,
                visited=state.visited,
                run_id=state.run_id,
                fail_fast=agent.options.delegate_fail_fast,
                interaction_mode=agent.options.interaction_mode,
                delegation_base=state.delegation_n,
            )
            if interactive:  # every task takes its d-N, as in Shelly
                state.delegation_n += len(entries)
            for request in requests:
                request.scopes, request.watched = list(state.scopes), state.watched
                request.priority, request.share = state.priority, state.share
                request.path = [*state.path, agent.name]
        except DelegationRejected as exc:
            await self._answered_at_once(call, str(exc), is_error=True)
            return
        if not requests:
            done = [e for e in entries if e is not None]
            await self._answered_at_once(call, format_entries(done), is_error=False)
            return
        for request in requests:  # the chain limit of their handoffs is this agent's
            request.max_handoffs = agent.options.max_handoffs
        if agent.options.reflections is not None:  # searched once: journaled with the requests
            found = await reflections.search_all(agent.options.reflections, [r.task for r in requests])
            for request, text in zip(requests, found, strict=True):
                request.reflections = text
        pending = PendingDelegation(tool_call_id=call.id, entries=entries, requests=requests)
        state.pending.append(pending)
        self._running -= 1  # a delegation is journaled with the suspension (or its results) instead
        if self.delegator is None:
            return
        results = await self.delegator.delegate(self, requests)
        if results is not None:
            for request, entry in zip(requests, results, strict=True):
                pending.entries[request.index] = entry
            self.emit(events.TOOL_CALL_END, tool=call.name, call_id=call.id, is_error=False)

    async def _answered_at_once(self, call: ToolCall, content: str, *, is_error: bool) -> None:
        """The result of a ``delegate`` or ``answer_delegation_questions`` call that reaches no child."""
        self.state.tool_results[call.id] = ToolResult(tool_call_id=call.id, content=content, is_error=is_error)
        self.emit(events.TOOL_CALL_END, tool=call.name, call_id=call.id, is_error=is_error)
        await self._result_recorded()

    async def _answer_call(self, call: ToolCall) -> None:
        """``answer_delegation_questions``: every id checked first, then the answers handed to the
        children; the results come back as a delegation's do (at once, or after a suspension)."""
        state = self.state
        self.emit(events.TOOL_CALL_START, tool=call.name, call_id=call.id, arguments=call.arguments[:500])
        try:
            answers = parse_answers(call.arguments)
            delegations = answered(state, answers, call.id)
        except DelegationRejected as exc:
            await self._answered_at_once(call, str(exc), is_error=True)
            return
        if not delegations:
            await self._answered_at_once(call, "[]", is_error=False)
            return
        requests = [d.request for d in delegations]
        pending = PendingDelegation(tool_call_id=call.id, entries=[None] * len(requests), requests=requests)
        state.pending.append(pending)
        self._running -= 1  # journaled with the suspension (or its results), as a delegation
        if self.delegator is None:
            return
        results = await self.delegator.answer(self, delegations, [a.answer for a in answers])
        if results is not None:
            pending.entries = list(results)
            self.emit(events.TOOL_CALL_END, tool=call.name, call_id=call.id, is_error=False)

    async def close(self) -> None:
        """The run ended (any way): its interactive children still waiting are cancelled and
        forgotten (Shelly's ``DelegationRegistry.Close``). Safe to call twice."""
        if self.delegator is not None and (self.state.delegations or self._answer is not None):
            await self.delegator.close(self)
        self.state.delegations = {}

    def deliver(self, key: str, entry: DelegateEntry) -> bool:
        """Record a child's entry by its request key. Idempotent: a second delivery is ignored.

        Returns True when no child is missing any more.
        """
        for pending in self.state.pending:
            for request in pending.requests:
                if request.key == key and pending.entries[request.index] is None:
                    pending.entries[request.index] = entry
        return not self.missing()

    def deliver_result(self, call_id: str, result: ToolResult) -> bool:
        """Record the result of a suspended tool call. Idempotent: a call no longer awaiting (its
        result delivered already) is left alone. Returns True when the run no longer waits."""
        payload = self.state.awaiting.pop(call_id, None)
        if payload is not None:
            self.state.tool_results[call_id] = result.model_copy(update={"tool_call_id": call_id})
            self.emit(events.TOOL_CALL_END, tool=str(payload.get("tool", "")), call_id=call_id,
                      is_error=result.is_error)
        return not self.waiting()

    def deliver_decision(self, call_id: str, verdict: Verdict, decision_id: str = "") -> bool:
        """Apply a person's verdict to a gated call awaiting it (approved: it runs on the run's next
        step; rejected: its error result). Idempotent like :meth:`deliver_result`. Returns True
        when the run no longer waits."""
        payload = self.state.awaiting.pop(call_id, None)
        if payload is not None:
            approval.apply_verdict(self, call_id, str(payload.get("tool", "")), verdict,
                                   asked=float(payload.get("asked") or 0), decision_id=decision_id)
        return not self.waiting()

    async def _ended(self, reply: Message, completion: CompletionResult | None) -> Message:
        """The hooks' ``on_run_end`` on a run that ends with ``task_complete`` or ``handoff``: they
        see the completion's summary as the reply (what the parent gets), before the run is
        journaled as done. Returns ``reply`` unless a hook gave another; a hook's reply to a
        ``task_complete`` becomes the completion's summary, since that is what the parent reads
        (the README's ``Audit`` hook counted nothing for a child that ended so)."""
        if not self._hooks:
            return reply
        shown = reply if completion is None else Message.text(self.agent.name, Role.ASSISTANT, completion.summary)
        out = await self._hooks.run_end(self, shown)
        if out is shown:
            return reply
        if completion is not None and self.state.completion is completion:
            self.state.completion = completion.model_copy(update={"summary": out.text_content()})
        return out

    async def _finish_tools(self) -> StepOutcome:
        """Append every result of the reply in call order, then continue or finish."""
        agent, state = self.agent, self.state
        reply = self._reply()
        by_call = {p.tool_call_id: p for p in state.pending}
        messages = []
        for pending in state.pending:
            settle(state, pending)
            for entry in pending.entries:  # a finished child's subtree, once: a question carries none
                if entry is not None and entry.usage is not None:
                    state.children_usage = state.children_usage + entry.usage
        for call in reply.tool_calls():
            if call.id in by_call:
                entries = [e for e in by_call[call.id].entries if e is not None]
                result = ToolResult(tool_call_id=call.id, content=format_entries(entries))
            else:
                result = state.tool_results.get(call.id) or ToolResult(
                    tool_call_id=call.id, content=f"tool not found: {call.name}", is_error=True
                )
            messages.append(Message(sender=agent.name, role=Role.TOOL, parts=[result]))
        agent.chat.append(*messages)
        if agent.options.reflections is not None:
            for pending in state.pending:
                for request in pending.requests:
                    entry = pending.entries[request.index]
                    if entry is not None:
                        await reflections.write(agent.options.reflections, request.agent, request.task,
                                                entry.completion)
        for m in messages:
            r = m.parts[0]
            self.emit(events.MESSAGE_ADDED, role="tool", text=getattr(r, "content", "")[:EVENT_TEXT_LIMIT])
        state.tool_results = {}
        state.started = []
        state.pending = []
        state.awaiting = {}
        state.approved = {}
        if state.completion is not None or state.handoff is not None:
            final = await self._ended(reply, state.completion)  # may rewrite state.completion
            state.phase = Phase.DONE
            await self._checkpoint("tools")
            return Finished(final, state.completion)
        state.phase = Phase.MODEL
        await self._checkpoint("tools")
        return Continue()
