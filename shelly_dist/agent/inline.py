"""In-process delegation: every child is an asyncio task in this event loop.

This is how ``Agent.run`` and the embedded runtime run children. It keeps Shelly's semantics —
per-entry errors, siblings left running, results in input order — with two deliberate
differences: an agent's ``max_concurrency`` caps how many of its instances run at once here (extra
children wait their turn), and ``delegate_fail_fast`` cancels the siblings of the first failed
entry.

The task-board coupling is here too: a child with a ``task_id`` claims the task before it runs,
its outcome moves the task, and cancelling the task on the board stops the child.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from shelly_dist import events
from shelly_dist.agent.delegation import board_status, child_messages, entry_from_outcome
from shelly_dist.agent.handoff import next_peer
from shelly_dist.agent.interaction import auto_answer
from shelly_dist.agent.naming import instance_name
from shelly_dist.agent.records import ChildRequest, DelegateEntry
from shelly_dist.errors import AgentError, RunCancelled
from shelly_dist.events import Event, EventSink

if TYPE_CHECKING:
    from shelly_dist.agent.agent import Agent
    from shelly_dist.agent.registry import Registry
    from shelly_dist.agent.run import Run

PROGRESS_LIMIT = 500


def progress_sink(parent: EventSink, parent_name: str, child_name: str) -> EventSink:
    """Forward every child event unchanged, plus a ``delegation_progress`` for each non-empty
    assistant text of the child itself (cut at 500 characters with "...")."""

    def sink(event: Event) -> None:
        parent(event)
        if event.kind == events.MESSAGE_ADDED and event.agent == child_name and event.data.get("role") == "assistant":
            text = str(event.data.get("text") or "")
            if text:
                if len(text) > PROGRESS_LIMIT:
                    text = text[:PROGRESS_LIMIT] + "..."
                parent(
                    Event(
                        kind=events.DELEGATION_PROGRESS,
                        agent=child_name,
                        run_id=event.run_id,
                        data={"kind": "progress", "agent": child_name, "parent": parent_name, "message": text},
                    )
                )

    return sink


class InlineDelegator:
    """Runs children as asyncio tasks; one instance is shared by a whole run tree."""

    def __init__(self) -> None:
        self._limits: dict[str, asyncio.Semaphore] = {}

    def _limit(self, registry: Registry, name: str) -> asyncio.Semaphore | None:
        entry = registry.get(name)
        if entry is None or entry.max_concurrency <= 0:
            return None
        if name not in self._limits:
            self._limits[name] = asyncio.Semaphore(entry.max_concurrency)
        return self._limits[name]

    async def delegate(self, parent: Run, requests: list[ChildRequest]) -> list[DelegateEntry]:
        tasks = [asyncio.create_task(self.run_child(parent, r)) for r in requests]
        if not parent.agent.options.delegate_fail_fast:
            return list(await asyncio.gather(*tasks))
        return await self._fail_fast(tasks, requests)

    async def _fail_fast(
        self, tasks: list[asyncio.Task[DelegateEntry]], requests: list[ChildRequest]
    ) -> list[DelegateEntry]:
        pending = set(tasks)
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if any(t.result().error for t in done):
                    for t in pending:
                        t.cancel()
                    await asyncio.gather(*pending, return_exceptions=True)
                    break
        finally:
            for t in tasks:
                if not t.done():
                    t.cancel()
        out = []
        for task, request in zip(tasks, requests, strict=True):
            if task.cancelled():
                out.append(DelegateEntry(agent=request.agent, error="canceled: sibling failed"))
            else:
                out.append(task.result())
        return out

    def spawn(self, parent: Agent, request: ChildRequest) -> Agent:
        """Build the child instance: its own toolboxes, the parent's registry, board and events."""
        registry = parent.registry
        assert registry is not None
        name = request.spawned()
        child = registry.spawn(name, request.depth)
        child.set_registry(registry)
        child.name = instance_name(name, request.task, registry.next_id(name))
        if child.options.task_board is None:
            child.options.task_board = parent.options.task_board
        child.options.request_input = auto_answer(request.context)
        if parent.options.on_event is not None:
            child.options.on_event = progress_sink(parent.options.on_event, parent.name, child.name)
        return child

    async def run_child(self, parent: Run, request: ChildRequest) -> DelegateEntry:
        """Run one child to its end and map its outcome onto its entry, following its handoffs
        (each peer runs as the same entry). Never raises but cancellation of the parent."""
        outcome: DelegateEntry | ChildRequest = request
        while isinstance(outcome, ChildRequest):
            outcome = await self._run_one(parent, outcome)
        return outcome

    async def _run_one(self, parent: Run, request: ChildRequest) -> DelegateEntry | ChildRequest:
        """Run one child (or handoff peer); its entry, or the request of the peer it handed off to."""
        from shelly_dist.agent.run import Run

        registry = parent.agent.registry
        assert registry is not None
        limit = self._limit(registry, request.spawned())
        async with limit if limit is not None else contextlib.nullcontext():
            try:
                child = self.spawn(parent.agent, request)
            except AgentError as exc:
                return DelegateEntry(agent=request.agent, error=str(exc))
            board = parent.agent.options.task_board if request.task_id else None
            if board is not None and request.task_id:
                try:
                    await board.claim(request.task_id, child.name)
                except Exception as exc:
                    return DelegateEntry(agent=request.agent, error=f'failed to claim task "{request.task_id}": {exc}')
            run = Run.start(child, child_messages(request), visited=request.visited, delegator=self)
            emit = parent.agent.options.on_event
            if emit is not None:
                emit(Event(kind=events.AGENT_START, agent=child.name, run_id=run.state.run_id,
                           data={"parent": parent.agent.name, "task": request.task[:500], "depth": request.depth}))
            entry = await self._run(child, run, request, board)
            peer = next_peer(request, run.state, registry) if not entry.error else None
            if isinstance(peer, DelegateEntry):  # a refused handoff is the entry's error
                entry = peer
            # After a handoff the task stays with the chain: the peer claims it and settles it.
            if not isinstance(peer, ChildRequest) and board is not None and request.task_id:
                try:
                    await board.update_status(request.task_id, board_status(entry))
                except Exception as exc:
                    entry.warning = f'task board update failed for "{request.task_id}": {exc}'
            if emit is not None:
                emit(Event(kind=events.AGENT_END, agent=child.name, run_id=run.state.run_id,
                           data={"parent": parent.agent.name, "usage": run.state.usage.model_dump()}))
            if isinstance(peer, ChildRequest):
                return peer
            if emit is not None:
                emit(Event(kind=events.DELEGATION_PROGRESS, agent=child.name, run_id=run.state.run_id,
                           data={"kind": "result", "agent": child.name, "parent": parent.agent.name,
                                 "result": entry.to_json()}))
            return entry

    async def _run(self, child: Agent, run: Run, request: ChildRequest, board: object) -> DelegateEntry:
        child_task = asyncio.ensure_future(child.execute(run))
        watcher: asyncio.Task[None] | None = None
        if board is not None and request.task_id:
            watcher = asyncio.ensure_future(board.wait_canceled(request.task_id))  # type: ignore[attr-defined]
        try:
            if watcher is not None:
                await asyncio.wait({child_task, watcher}, return_when=asyncio.FIRST_COMPLETED)
                if not child_task.done():
                    child_task.cancel()
                    await asyncio.gather(child_task, return_exceptions=True)
                    return entry_from_outcome(request.agent, error=RunCancelled("task canceled"))
            reply = await child_task
        except asyncio.CancelledError:
            child_task.cancel()
            raise
        except Exception as exc:
            return entry_from_outcome(
                request.agent, error=exc, instance=child.name, max_iterations=child.options.max_iterations
            )
        finally:
            if watcher is not None and not watcher.done():
                watcher.cancel()
        return entry_from_outcome(request.agent, reply=reply, completion=run.state.completion)
