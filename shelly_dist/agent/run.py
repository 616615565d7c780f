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

The machine is cut by idea: :mod:`.run_setup` (outcomes, the delegator and checkpoint protocols,
construction and preparation), :mod:`.run_delegating` (children requested and delivered back) and
this module (the steps). Every name of the parts is importable from here, as it always was.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import shelly_dist.agent.reflections as reflections
from shelly_dist import events
from shelly_dist.agent import approval, steering
from shelly_dist.agent.delegation import format_entries
from shelly_dist.agent.deltas import RunDeltas
from shelly_dist.agent.effects import EffectPhase, IterationContext, estimate_tokens
from shelly_dist.agent.interactive import settle
from shelly_dist.agent.overflow import complete_or_shrink
from shelly_dist.agent.records import CompletionResult, Phase
from shelly_dist.agent.run_delegating import RunDelegating
from shelly_dist.agent.run_setup import (
    CAP_MARKER,
    EVENT_TEXT_LIMIT,
    OUTCOME_UNKNOWN,
    RESULT_CAP,
    WARNING_TEXT,
    Checkpoint,
    Continue,
    Delegator,
    Finished,
    RunSetup,
    StepOutcome,
    Suspended,
    cap_result,
)
from shelly_dist.agent.spawn import drain
from shelly_dist.cancellation import raise_if_cancelled
from shelly_dist.chats import Message, Role, ToolCall, ToolResult
from shelly_dist.chats.replies import STOP_REASON, argument_problem, parse_arguments, truncated
from shelly_dist.errors import AgentError, MaxIterationsExceeded, UsageError
from shelly_dist.events import REPLY_TRUNCATED
from shelly_dist.identity import acting_as
from shelly_dist.models import Usage, streaming
from shelly_dist.models.speed import SPEED
from shelly_dist.models.suspend import ModelCall, ModelWait, SuspendModel, calling_model, raise_if_failed
from shelly_dist.observability import metrics, tracing
from shelly_dist.tools import Tool
from shelly_dist.tools.decisions import edited_note
from shelly_dist.tools.hooks import bind_run_memory
from shelly_dist.tools.suspend import SuspendCall

__all__ = [
    "CAP_MARKER",
    "EVENT_TEXT_LIMIT",
    "OUTCOME_UNKNOWN",
    "RESULT_CAP",
    "WARNING_TEXT",
    "Checkpoint",
    "Continue",
    "Delegator",
    "Finished",
    "Run",
    "RunDelegating",
    "RunSetup",
    "StepOutcome",
    "Suspended",
    "cap_result",
]


class Run(RunDelegating):
    """Drives one agent's loop over its chat. Not safe for two tasks to step at once."""

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
