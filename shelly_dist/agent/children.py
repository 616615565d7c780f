"""A delegated child's life, written once for both runtimes.

A child is spawned and named, claims its board task, runs inside the board's cancel scope, ends
as an entry, may hand its delegation off to a peer, settles its board task, and reports its start
and end with the same events (docs/events.md). :class:`ChildLife` owns that sequence —
``begin`` → steps inside ``scope`` → ``end`` — and each runtime only decides *where* the child runs:
an asyncio task in this process (:mod:`shelly_dist.runtime.local`) or Celery tasks on workers
(:mod:`shelly_dist.runtime.celery.worker.executor`), where every exit, the early ones included
(stopped before its first step, a refused claim, a rebuild that failed), calls ``end``. So a config
and a failure read the same in both (DESIGN §6, STYLE lessons 16 and 18).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from shelly_dist import events
from shelly_dist.agent.delegation import board_status, entry_from_outcome
from shelly_dist.agent.handoff import next_peer
from shelly_dist.agent.naming import instance_name
from shelly_dist.agent.records import ChildRequest, DelegateEntry, child_run_id, keyed_run_id
from shelly_dist.agent.stops import DELEGATION_CLOSED, SIBLING_FAILED, TASK_CANCELED, BoardCancelScope
from shelly_dist.events import Event, EventSink

if TYPE_CHECKING:
    from shelly_dist.agent.agent import Agent
    from shelly_dist.agent.board import TaskBoardHook
    from shelly_dist.agent.run import Run

PROGRESS_LIMIT = 500
"""Characters of a child's assistant text carried by a ``delegation_progress`` event (Shelly's)."""

TASK_LIMIT = 200
"""Characters of a child's task carried by its ``run_started`` and ``run_queued`` events."""

__all__ = [
    "ChildLife",
    "End",
    "Ending",
    "Stop",
    "board_scope",
    "child_run_id",
    "claim_task",
    "end_events",
    "ending_of",
    "finished",
    "handoff_entry",
    "name_child",
    "next_step",
    "outcome_entry",
    "peer_run_id",
    "progress_sink",
    "report",
    "result_progress",
    "run_id_of",
    "settle_task",
    "started",
]


class Ending(StrEnum):
    """How a run ended, as its ``run_finished`` event and its journal record say."""

    DONE = "done"
    FAILED = "failed"
    CANCELED = "canceled"


STOPPED = (TASK_CANCELED, SIBLING_FAILED, DELEGATION_CLOSED)
"""Entry errors of a child that was stopped (board cancel, a failed sibling, its interactive
delegation closed, the tree cancelled) rather than one that failed on its own."""


def ending_of(entry: DelegateEntry, *, raised: bool = False) -> Ending:
    """A finished child's ending: stopped (its entry's error says so) → canceled; an error, or a
    run that ``raised`` (out of iterations or a budget: its entry is a synthetic failed
    completion) → failed; else done — a child that reported ``task_complete`` with ``failed``
    ended ``done``, and its entry says how its task went."""
    if entry.error in STOPPED:
        return Ending.CANCELED
    return Ending.FAILED if entry.error or raised else Ending.DONE


run_id_of = keyed_run_id
"""The run id of the child joined under ``join_key`` (``<parent step>:<call>:<index>``)."""


def peer_run_id(run_id: str, peer: ChildRequest) -> str:
    """The run id of the peer a child (run ``run_id``) handed its delegation off to."""
    return f"{run_id}-h{peer.handoffs}"


def name_child(agent: Agent, request: ChildRequest, n: int) -> None:
    """Give a spawned child its instance name (``coder-refactor-1``); ``n`` comes from the
    runtime's counter (the registry's in a process, Redis's on the pool)."""
    agent.name = instance_name(request.spawned(), request.task, n)


async def claim_task(board: TaskBoardHook | None, request: ChildRequest, name: str) -> DelegateEntry | None:
    """Claim the child's board task before its first step; the failed entry when the claim is refused."""
    if board is None or not request.task_id:
        return None
    try:
        await board.claim(request.task_id, name)
    except Exception as exc:
        return DelegateEntry(agent=request.agent, error=f'failed to claim task "{request.task_id}": {exc}')
    return None


def board_scope(board: TaskBoardHook | None, request: ChildRequest | None) -> BoardCancelScope:
    """The scope a child's steps run in: cancelling its task on the board stops it."""
    return BoardCancelScope(board, request.task_id if request is not None else None)


def next_step(request: ChildRequest, run: Run, entry: DelegateEntry) -> DelegateEntry | ChildRequest:
    """After the child ended with ``entry``: the request of the peer it handed off to (the same
    entry carries on), or its entry (a refused handoff's error replaces it)."""
    if entry.error:
        return entry
    peer = next_peer(request, run.state, run.agent.registry)
    return entry if peer is None else peer


def handoff_entry(peer: ChildRequest) -> dict[str, Any]:
    """What the ``run_finished`` of a child that handed off carries as its entry."""
    return {"agent": peer.agent, "handoff": peer.spawned()}


async def settle_task(board: TaskBoardHook | None, request: ChildRequest | None, entry: DelegateEntry) -> None:
    """Move the child's board task to where its entry says (never after a handoff: the peer
    claims and settles it); a failed update is the entry's warning, not its error."""
    if board is None or request is None or not request.task_id:
        return
    try:
        await board.update_status(request.task_id, board_status(entry))
    except Exception as exc:
        entry.warning = f'task board update failed for "{request.task_id}": {exc}'


def started(run: Run, *, parent: str, task: str, worker: str = "") -> None:
    """Emit ``run_started`` for a run's first step (a run continued elsewhere emits ``run_resumed``)."""
    run.emit(events.RUN_STARTED, worker=worker, depth=run.agent.depth, parent=parent, task=task[:TASK_LIMIT])


def finished(
    agent: str, run_id: str, *, ending: Ending | str, entry: dict[str, Any], usage: dict[str, Any],
    worker: str = "", session: str = "",
) -> Event:
    """The ``run_finished`` event of a run that ended with ``entry`` (docs/events.md)."""
    return Event(kind=events.RUN_FINISHED, agent=agent, run_id=run_id, session_id=session,
                 data={"status": str(ending), "worker": worker, "entry": entry, "usage": usage})


def outcome_entry(request: ChildRequest, run: Run, *, reply: Any = None, error: BaseException | None = None
                  ) -> DelegateEntry:
    """The entry of a child run that ended with ``reply`` or raised ``error``."""
    if error is not None:
        return entry_from_outcome(request.agent, error=error, instance=run.agent.name,
                                  max_iterations=run.agent.options.max_iterations)
    return entry_from_outcome(request.agent, reply=reply, completion=run.state.completion)


def end_events(
    name: str, run_id: str, *, parent: str, entry: DelegateEntry, ending: Ending | str, usage: dict[str, Any],
    worker: str = "", session: str = "",
) -> list[Event]:
    """A child's last two events, in order: its entry as its parent (instance ``parent``) gets it
    (Shelly's ``delegation_progress`` of kind ``result``), then its ``run_finished``."""
    return [result_progress(name, parent, run_id, entry),
            finished(name, run_id, ending=ending, entry=entry.to_json(), usage=usage, worker=worker,
                     session=session)]


def report(run: Run, event: Event) -> None:
    """Send ``event`` to the run's sink (the parent's, through :func:`progress_sink`, embedded;
    the session stream on a worker)."""
    sink = run.agent.options.on_event
    if sink is not None:
        sink(event)


def result_progress(child: str, parent: str, run_id: str, entry: DelegateEntry) -> Event:
    """Shelly's ``delegation_progress`` of kind ``result``: the child's entry, as its parent gets it."""
    return Event(kind=events.DELEGATION_PROGRESS, agent=child, run_id=run_id,
                 data={"kind": "result", "agent": child, "parent": parent, "result": entry.to_json()})


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
                parent(Event(kind=events.DELEGATION_PROGRESS, agent=child_name, run_id=event.run_id,
                             data={"kind": "progress", "agent": child_name, "parent": parent_name,
                                   "message": text}))

    return sink


@dataclass(frozen=True)
class Stop:
    """A child stopped from outside — its board task canceled, a failed sibling (fail-fast), its
    interactive delegation closed or timed out, its tree cancelled: it ends ``canceled`` with
    ``reason`` as its entry's error, whatever the reason says."""

    reason: str


@dataclass
class End:
    """How a child ended: its entry, its ending, the events that report it (in order), and the peer
    it handed its delegation off to (``None`` when it did not: then ``entry`` is what its parent gets)."""

    entry: DelegateEntry
    ending: Ending
    events: list[Event] = field(default_factory=list)
    peer: ChildRequest | None = None


def settled(result: DelegateEntry | Stop, agent: str, *, raised: bool = False) -> tuple[DelegateEntry, Ending]:
    """The entry and ending of a run that ended with ``result`` (a child's or a root's)."""
    if isinstance(result, Stop):
        return DelegateEntry(agent=agent, error=result.reason), Ending.CANCELED
    return result, ending_of(result, raised=raised)


class ChildLife:
    """One delegated child's life, in the order both runtimes follow: :meth:`spawn` names the
    instance and wires its progress, :meth:`begin` reports its start and claims its board task,
    its steps run inside :meth:`scope`, and :meth:`end` builds its entry, hands off or settles the
    board, and returns the events that report the end. A runtime calls :meth:`end` on every exit:
    a child that never began (stopped while queued, its rebuild failed) still reports its end the
    same way, and a child that began has its board task settled."""

    def __init__(self, request: ChildRequest, run_id: str, *, board: TaskBoardHook | None = None,
                 parent: str = "", worker: str = "", session: str = "") -> None:
        self.request = request
        self.run_id = run_id
        self.board = board if request.task_id else None
        self.parent = parent or request.parent_agent
        """The parent instance's name, as the ``delegation_progress`` events carry it."""
        self.worker = worker
        self.session = session
        self.began = False
        """Set once the child's start is reported and its board task is its own: only then does
        its end settle the task (a refused claim is not its to settle) and carry its usage."""

    def spawn(self, agent: Agent, n: int, sink: EventSink | None) -> None:
        """Name the instance (``coder-refactor-1``; ``n`` from the runtime's counter) and send its
        events to ``sink`` with Shelly's ``delegation_progress`` for its texts."""
        name_child(agent, self.request, n)
        if sink is not None:
            agent.options.on_event = progress_sink(sink, self.parent, agent.name)

    async def begin(self, run: Run, *, parent_run: str, fresh: bool = True) -> DelegateEntry | None:
        """The child's start: ``run_started`` and its board claim when ``fresh`` (a run continued
        after its first step has reported and claimed already); the failed entry when the board
        refuses the claim — then :meth:`end` it with that entry."""
        if fresh:
            started(run, parent=parent_run, task=self.request.task, worker=self.worker)
            if (refused := await claim_task(self.board, self.request, run.agent.name)) is not None:
                return refused
        self.began = True
        return None

    @contextlib.asynccontextmanager
    async def scope(self, *also: contextlib.AbstractAsyncContextManager[Any]) -> AsyncIterator[None]:
        """Where the child's steps run: cancelling its task on the board stops them (and ``also``,
        e.g. an interactive child's closing scope)."""
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(board_scope(self.board, self.request))
            for cm in also:
                await stack.enter_async_context(cm)
            yield

    async def end(self, run: Run | None, result: DelegateEntry | Stop, *, raised: bool = False) -> End:
        """End the child with ``result`` (its entry, or how it was stopped); ``raised`` when its run
        raised (out of iterations or a budget: failed, though its entry is a completion). A child
        that finished and asked for a handoff ends ``done`` with the peer to run as the same entry;
        any other end settles its board task (when it began) and reports the entry as its parent
        gets it, then ``run_finished``."""
        entry, ending = settled(result, self.request.agent, raised=raised)
        entry.agent = self.request.agent  # a handoff's peer reports under the name its delegation asked for
        name = run.agent.name if run is not None else self.request.spawned()
        usage = run.state.usage.model_dump() if run is not None else {}
        if run is not None and self.began:
            entry.usage = self.request.entry_usage(run.state)  # joined into the parent, which totals its tree
            if not raised and not isinstance(result, Stop):
                step = next_step(self.request, run, entry)
                if isinstance(step, ChildRequest):
                    return End(entry, Ending.DONE, [finished(name, self.run_id, ending=Ending.DONE,
                                                             entry=handoff_entry(step), usage=usage,
                                                             worker=self.worker, session=self.session)], peer=step)
                if step is not entry:  # a refused handoff: its error is the entry's
                    entry, ending = step, Ending.FAILED
                    entry.usage = self.request.entry_usage(run.state)
        if self.began:
            await settle_task(self.board, self.request, entry)
        return End(entry, ending, end_events(name, self.run_id, parent=self.parent, entry=entry, ending=ending,
                                             usage=usage, worker=self.worker, session=self.session))
