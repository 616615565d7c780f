"""A run's delegating: the ``delegate`` and ``answer`` calls of a reply turned into children's
requests, and the children's entries, suspended tools' results and decisions delivered back.

Between the setup (:mod:`.run_setup`) and the steps (:mod:`.run`): a step calls these, and a
runtime feeds a suspended run through :meth:`RunDelegating.deliver` and its siblings.
"""

from __future__ import annotations

import shelly_dist.agent.reflections as reflections
from shelly_dist import events
from shelly_dist.agent import approval
from shelly_dist.agent.delegation import format_entries, plan_children
from shelly_dist.agent.interactive import answered, parse_answers
from shelly_dist.agent.records import ChildRequest, DelegateEntry, PendingDelegation
from shelly_dist.agent.run_setup import RunSetup
from shelly_dist.chats import ToolCall, ToolResult
from shelly_dist.errors import DelegationRejected
from shelly_dist.tools.decisions import Verdict


class RunDelegating(RunSetup):
    """The run's children: requested from a reply, delivered back."""

    def missing(self) -> list[ChildRequest]:
        """Children whose entries have not been delivered yet."""
        return [r for p in self.state.pending for r in p.missing()]

    def waiting(self) -> bool:
        """Whether the run still waits: on children, or on suspended tool calls' results."""
        return bool(self.missing() or self.state.awaiting)

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
