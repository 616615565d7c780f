"""In-process delegation: every child is an asyncio task in this event loop.

This is how ``Agent.run`` (by default) and the embedded runtime run children. It keeps Shelly's semantics —
per-entry errors, siblings left running, results in input order — with two deliberate
differences: an agent's ``max_concurrency`` caps how many of its instances run at once within a
session (extra children wait their turn for a leased slot, :mod:`shelly_dist.agent.slots`), and
``delegate_fail_fast`` cancels the siblings of the first failed entry (:mod:`shelly_dist.agent.stops`).

The child's life itself — naming, board claim and cancel scope, entry, handoff, board update,
events — is :mod:`shelly_dist.agent.children`, which the pool's workers call at the same points;
this module only decides that a child runs here, as an asyncio task, and when (slots, fail-fast,
interactive children).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shelly_dist import identity
from shelly_dist.agent import children
from shelly_dist.agent.interaction import Answer, ChildQuestion, auto_answer
from shelly_dist.agent.records import ChildRequest, DelegateEntry, LiveDelegation
from shelly_dist.agent.run import Run
from shelly_dist.agent.slots import DEFAULT_SLOT_LEASE, Acquired, MemorySlots, SlotLease
from shelly_dist.agent.stops import SIBLING_FAILED, TASK_CANCELED, stops_siblings
from shelly_dist.chats import Message
from shelly_dist.errors import AgentError
from shelly_dist.runtime.local.interactive import LiveChild, LiveChildren, next_event
from shelly_dist.runtime.local.spawns import LocalSpawner
from shelly_dist.runtime.local.stops import stop

if TYPE_CHECKING:
    from shelly_dist.agent.agent import Agent
    from shelly_dist.agent.registry import Registry


class InlineDelegator:
    """Runs children as asyncio tasks; one instance is shared by a whole run tree."""

    def __init__(self, slots: MemorySlots | None = None) -> None:
        self.slots = slots or MemorySlots()
        self._slot_of: dict[str, _Slot] = {}
        """The slot each limited child run holds, by run id, so its own delegation can give it back."""
        self._interactive: dict[str, LiveChildren] = {}
        """Each parent run's interactive children (:mod:`.interactive`), by parent run id."""
        self.chats: dict[str, list[Message]] = {}
        """The chats of team members' ended turns, by run id, until their next turn takes them."""
        self.iterations: dict[str, int] = {}
        """The model calls each ended child run made, by run id (what a spawn's announcement says)."""
        self.spawner = LocalSpawner(self)
        """Where the tree's ``spawn`` children run (asyncio tasks of this loop)."""

    async def _slot(self, registry: Registry, request: ChildRequest) -> _Slot | None:
        """Wait for a slot of the child's agent when it has a ``max_concurrency``."""
        name = request.spawned()
        entry = registry.get(name)
        if entry is None or entry.max_concurrency <= 0:
            return None
        slot = _Slot(identity.session_id(), name, f"{request.parent_run_id}:{request.key}:{request.handoffs}",
                     entry.max_concurrency)
        await slot.take(self.slots)
        return slot

    @contextlib.asynccontextmanager
    async def _slot_given_back(self, held: _Slot | None) -> AsyncIterator[None]:
        """A limited run that waits (on its children, or for its parent's answer) gives its slot
        back meanwhile and waits for one again afterwards (not when cancelled), as a run suspended
        on the pool holds no slot."""
        if held is not None:
            await self.slots.release(held.session, held.agent, held.holder)
        yield
        if held is not None:
            await held.take(self.slots)

    async def wait_model(self, run: Run) -> None:
        """A run whose model call is suspended (the provider governor, a vendor batch) waits here
        until it is due or its reply is delivered; a limited run holds no slot meanwhile, as a run
        suspended on the pool holds none."""
        async with self._slot_given_back(self._slot_of.get(run.state.run_id)):
            await run.wait_model_here()

    async def delegate(self, parent: Run, requests: list[ChildRequest]) -> list[DelegateEntry]:
        """Run the children; a limited parent holds no slot while it waits on them."""
        async with self._slot_given_back(self._slot_of.get(parent.state.run_id)):
            if any(r.delegation_id for r in requests):
                return await self._start_interactive(parent, requests)
            if not any(r.fail_fast for r in requests):
                return list(await asyncio.gather(*(self.run_child(parent, r) for r in requests)))
            tasks = [asyncio.create_task(self.run_child(parent, r)) for r in requests]
            return await self._fail_fast(tasks, requests)

    # -- interactive delegation ---------------------------------------------------------------

    def _live(self, parent: Run) -> LiveChildren:
        return self._interactive.setdefault(parent.state.run_id, LiveChildren())

    async def _start_interactive(self, parent: Run, requests: list[ChildRequest]) -> list[DelegateEntry]:
        """Start every child in the background; return once each has asked or ended."""
        live = self._live(parent)
        started: list[LiveChild | DelegateEntry] = []
        for r in requests:
            child = LiveChild(r)
            try:
                live.register(r.delegation_id, child)
            except AgentError as exc:
                started.append(DelegateEntry(agent=r.agent, error=str(exc)))
                continue
            child.start(lambda r=r: self.run_child(parent, r))  # type: ignore[misc]
            started.append(child)
        return await self._events(parent, live, started)

    async def answer(self, parent: Run, delegations: list[LiveDelegation], answers: list[str]) -> list[DelegateEntry]:
        """Hand each answer to its waiting child; return once each has asked again or ended."""
        live = self._live(parent)
        targets: list[LiveChild | DelegateEntry] = []
        for d, text in zip(delegations, answers, strict=True):
            child = live.get(d.request.delegation_id)
            if child is None:  # its run ended meanwhile (cancelled): say so in its entry
                targets.append(DelegateEntry(agent=d.request.agent, error="context canceled"))
                continue
            await child.answers.put(text)
            targets.append(child)
        return await self._events(parent, live, targets)

    @staticmethod
    async def _events(parent: Run, live: LiveChildren, targets: list[LiveChild | DelegateEntry]
                      ) -> list[DelegateEntry]:
        timeout = parent.agent.options.question_timeout

        async def one(t: LiveChild | DelegateEntry) -> DelegateEntry:
            return t if isinstance(t, DelegateEntry) else await next_event(live, t, timeout)

        return list(await asyncio.gather(*(one(t) for t in targets)))

    async def close(self, parent: Run) -> None:
        """The parent run ended: cancel its interactive children still waiting."""
        live = self._interactive.pop(parent.state.run_id, None)
        if live is not None:
            await live.close()

    def _live_child(self, request: ChildRequest) -> LiveChild | None:
        """The interactive child (or a handoff peer on its entry) ``request`` runs as, if any."""
        live = self._interactive.get(request.parent_run_id) if request.delegation_id else None
        return live.get(request.delegation_id) if live is not None else None

    def _asker(self, request: ChildRequest) -> Answer | None:
        """Where an interactive child's questions go: to its parent's model (a limited child holds
        no slot while it waits for the answer)."""
        child = self._live_child(request) if request.asks_parent() else None
        if child is None:
            return None
        live = child

        async def ask(question: ChildQuestion) -> str:
            async with self._slot_given_back(self._slot_of.get(live.run_id)):
                return await live.ask(question)

        return ask

    async def _fail_fast(
        self, tasks: list[asyncio.Task[DelegateEntry]], requests: list[ChildRequest]
    ) -> list[DelegateEntry]:
        pending = set(tasks)
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if any(stops_siblings(r, t.result()) for t, r in zip(tasks, requests, strict=True) if t in done):
                    await stop(pending, SIBLING_FAILED)  # the reason its run_finished and board task give
                    break
        finally:
            for t in tasks:
                if not t.done():
                    t.cancel()
        out = []
        for task, request in zip(tasks, requests, strict=True):
            if task.cancelled():
                out.append(DelegateEntry(agent=request.agent, error=SIBLING_FAILED))
            else:
                out.append(task.result())
        return out

    def spawn(self, parent: Agent, request: ChildRequest, life: children.ChildLife) -> Agent:
        """Build the child instance: its own toolboxes, the parent's registry, board and events."""
        registry = parent.registry
        assert registry is not None
        name = request.spawned()
        child = registry.spawn(name, request.depth)
        child.set_registry(registry)
        life.spawn(child, registry.next_id(name), parent.options.on_event)
        if child.options.task_board is None:
            child.options.task_board = parent.options.task_board
        child.options.request_input = self._asker(request) or auto_answer(request.context)
        return child

    async def run_child(self, parent: Run, request: ChildRequest, *, run_id: str = "") -> DelegateEntry:
        """Run one child to its end and map its outcome onto its entry, following its handoffs
        (each peer runs as the same entry). Never raises but cancellation of the parent."""
        run_id = run_id or children.child_run_id(parent.state.run_id, request, parent.state.iteration)
        outcome: DelegateEntry | ChildRequest = request
        while isinstance(outcome, ChildRequest):
            peer = outcome
            outcome = await self._run_one(parent, peer, run_id)
            if isinstance(outcome, ChildRequest):
                run_id = children.peer_run_id(run_id, outcome)
        return outcome

    async def _run_one(self, parent: Run, request: ChildRequest, run_id: str) -> DelegateEntry | ChildRequest:
        """Run one child (or handoff peer) as run ``run_id`` through its :class:`~.children.ChildLife`;
        its entry, or the request of the peer it handed off to."""
        registry = parent.agent.registry
        assert registry is not None
        slot = await self._slot(registry, request)
        async with slot.lease(self.slots) if slot is not None else contextlib.nullcontext():
            board = parent.agent.options.task_board if request.task_id else None
            life = children.ChildLife(request, run_id, board=board, parent=parent.agent.name)
            try:
                child = self.spawn(parent.agent, request, life)
            except AgentError as exc:
                return DelegateEntry(agent=request.agent, error=str(exc))
            history = self.chats.pop(request.history, None) if request.history else None
            run = Run.start_child(child, request, run_id=run_id, delegator=self, history=history)
            if (refused := await life.begin(run, parent_run=parent.state.run_id)) is not None:
                if history is not None:  # the member's chat waits for a turn that runs
                    self.chats[request.history] = history
                return self._reported(run, await life.end(run, refused)).entry
            if slot is not None:
                self._slot_of[run.state.run_id] = slot
            if (live := self._live_child(request)) is not None:
                live.run_id = run.state.run_id
            try:
                result, raised = await self._run(child, run, life, live)
            except asyncio.CancelledError as exc:  # stopped from outside: ends canceled, as on the pool
                await self._stopped(run, life, exc)
                raise
            finally:
                self._slot_of.pop(run.state.run_id, None)
                self.iterations[run.state.run_id] = run.state.iteration
                if request.turn:  # a team member's turn: its next turn continues this chat
                    self.chats[run.state.run_id] = run.agent.chat.messages()
            end = self._reported(run, await life.end(run, result, raised=raised))
            return end.peer or end.entry

    @staticmethod
    def _reported(run: Run, end: children.End) -> children.End:
        """Send the end's events to the run's sink (the parent's, through the progress sink)."""
        for event in end.events:
            children.report(run, event)
        return end

    @classmethod
    async def _stopped(cls, run: Run, life: children.ChildLife, exc: asyncio.CancelledError) -> None:
        """A child cancelled by a failed sibling (the cancel's message) or with its tree: its
        board task is settled and its ``run_finished`` says ``canceled`` and why, as a worker's
        would; the cancellation then goes on."""
        reason = str(exc.args[0]) if exc.args and exc.args[0] in children.STOPPED else TASK_CANCELED
        spawner = run.spawner
        if spawner is not None:  # the runs it spawned go with it
            with contextlib.suppress(Exception):
                await asyncio.shield(spawner.cancel_all(run.state.run_id))  # type: ignore[attr-defined]
        with contextlib.suppress(Exception):
            cls._reported(run, await asyncio.shield(life.end(run, children.Stop(reason))))

    @staticmethod
    async def _run(child: Agent, run: Run, life: children.ChildLife, live: LiveChild | None
                   ) -> tuple[DelegateEntry, bool]:
        """The child's entry, and whether its run raised (a run that ran out of a budget raised,
        though its entry is a synthetic failed completion)."""
        request = life.request
        try:
            async with life.scope(*([live.closing_scope()] if live is not None else [])):
                reply = await child.execute(run)
        except Exception as exc:
            return children.outcome_entry(request, run, error=exc), True
        return children.outcome_entry(request, run, reply=reply), False


@dataclass(frozen=True)
class _Slot:
    """One limited child's slot: which semaphore, its holder name and the limit."""

    session: str
    agent: str
    holder: str
    limit: int

    async def take(self, slots: MemorySlots) -> None:
        await slots.acquire(self.session, self.agent, self.holder, self.limit, DEFAULT_SLOT_LEASE)

    def lease(self, slots: MemorySlots) -> SlotLease:
        return SlotLease(slots, self.session, self.agent, self.holder, Acquired.NEW, DEFAULT_SLOT_LEASE)
