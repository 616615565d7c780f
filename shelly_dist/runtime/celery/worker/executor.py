"""Advancing a run on a worker: claim it, rebuild it from its journal, step it until it finishes
or must wait, journal every step, and join its result into its parent.

This is the body of both Celery tasks (``shelly.run_agent`` and ``shelly.resume_agent``): any
worker can continue any run, because everything the run is lives in Redis. A worker never waits
on a child (DESIGN §3 rule 1): a step that delegates registers the children, enqueues them,
journals the suspension and returns; the child that completes the join enqueues the resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from shelly_dist import events
from shelly_dist.agent import (
    ChildRequest,
    DelegateEntry,
    Finished,
    Phase,
    Registry,
    Run,
    RunState,
    Suspended,
    children,
    entry_from_outcome,
)
from shelly_dist.agent.children import ChildLife, End, Ending, Stop
from shelly_dist.agent.interaction import auto_answer
from shelly_dist.agent.interactive import suspend_question
from shelly_dist.agent.records import LiveDelegation
from shelly_dist.agent.stops import TASK_CANCELED, SiblingFailed
from shelly_dist.chats import Message, Role
from shelly_dist.errors import AgentError, ConfigError, RunCancelled, StepTimeout, StoreError, UsageError
from shelly_dist.identity import acting_as
from shelly_dist.observability import metrics, tracing
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.runtime.celery.children import interactive, model_waits, questions, spawns
from shelly_dist.runtime.celery.children.cancel import CancelWatch
from shelly_dist.runtime.celery.children.dispatch import dispatch_children
from shelly_dist.runtime.celery.children.handoff import hand_off
from shelly_dist.runtime.celery.children.join import enqueue_resume, finish_and_join, resume_each
from shelly_dist.runtime.celery.children.policy import PoolPolicy
from shelly_dist.runtime.celery.children.steering import RedisInbox
from shelly_dist.runtime.celery.journal import Journal, Lease, LeaseLost, RunEnd, RunRecord, RunStatus, child_key
from shelly_dist.runtime.celery.journal.stream import StreamSink, routed_to
from shelly_dist.runtime.celery.names import RUN_AGENT, Enqueue, task_kwargs
from shelly_dist.runtime.celery.settings import RuntimeSettings
from shelly_dist.runtime.wake import TeamContext, is_wake_run

logger = logging.getLogger(__name__)

STARTED_EVENTS_DELAY = 0.1
"""Seconds a fresh run's first events (``run_started``) wait for its first journal write to carry
them before they are written on their own: a quick step costs no extra write, and the live view,
which reads ten times a second, shows a slow step's start as soon as before."""

GENERATION_GRACE = 60.0
"""Seconds after a config generation's last live worker was seen during which its runs are left
for it (re-queued with a delay) rather than failed by a worker of another config."""


class WorkerContext(Protocol):
    """What the engine gives a worker: the config's fingerprint and agents per session."""

    fingerprint: str

    async def registry(self, session: str) -> Registry:
        """The agents of ``session``; async, since building them may read the session's own
        definitions from Redis (a workflow's inline agents), which must not block the loop."""
        ...

    async def aclose(self) -> None: ...


@dataclass
class Progress:
    """How one task's work on a run ended, for the task body and the logs."""

    outcome: str
    """``done``, ``failed``, ``canceled``, ``waiting``, ``skipped`` (someone else has it, or it has
    ended), ``abandoned`` (the lease was lost mid-step) or ``foreign`` (a run of another config
    generation, whose live workers should take it: try again later)."""
    detail: str = ""


class Executor:
    """Advances runs inside one worker process's event loop."""

    def __init__(
        self,
        ctx: WorkerContext,
        journal: Journal,
        enqueue: Enqueue,
        cancel_watch: CancelWatch,
        *,
        hostname: str | None = None,
    ) -> None:
        self.ctx = ctx
        self.journal = journal
        self.enqueue = enqueue
        self.cancel_watch = cancel_watch
        self.settings: RuntimeSettings = journal.settings
        self.hostname = hostname or socket.gethostname()
        self.policy = PoolPolicy(journal.client, journal.keys)

    async def registry(self, session: str) -> Registry:
        """The context's agents of ``session``; a context whose ``registry`` is still synchronous
        (a bootstrap written before it became async) is served too."""
        found = self.ctx.registry(session)
        return await found if inspect.isawaitable(found) else found  # type: ignore[return-value]

    async def advance(self, run_id: str, root: str, *, session: str = "", agent: str = "") -> Progress:
        """Take a ``max_concurrency`` slot for the run (policy), then advance it; a full agent
        sends the task back to the queue (``busy``) instead of waiting in it."""
        slot = await self.policy.slot(self.registry, run_id, session=session, agent=agent)
        if slot is None:
            return Progress("busy", f"max_concurrency: every slot of {agent or 'its agent'} is taken")
        async with slot:
            return await self._claim_and_advance(run_id, root, session=session, agent=agent)

    async def _claim_and_advance(self, run_id: str, root: str, *, session: str = "", agent: str = "") -> Progress:
        """Do all the work run ``run_id`` allows now. Safe to call twice for the same run, at once
        or later: a run someone else holds is ``skipped`` (its holder, or the reaper when the holder
        dies, carries it on), so a duplicate delivery is harmless.

        ``session`` and ``agent`` (the task's kwargs) let the claim number a fresh instance in the
        same round trip."""
        token = f"{self.hostname}:{uuid.uuid4().hex[:8]}"
        claim = await self.journal.claim(run_id, root, token, self.hostname, session=session, agent=agent,
                                         fingerprint=self.ctx.fingerprint)
        if claim.outcome == "foreign":
            if await generation_alive(self.journal, claim.detail):
                # the claim made it due after requeue_after: a reaper sends it to any worker of the
                # queue too (Celery's retry may bring it back to this one every time)
                return Progress("foreign", claim.detail)
            claim = await self.journal.claim(run_id, root, token, self.hostname, session=session, agent=agent)
            if claim.lease is not None:
                theirs = claim.lease.record.fingerprint
                error = (f"run {run_id}: config fingerprint mismatch: the run has {theirs}, "
                         f"worker {self.hostname} has {self.ctx.fingerprint}, and no worker of the run's config "
                         f"was seen in the last {GENERATION_GRACE:g}s. To fix: start the workers with the same "
                         "config and python: modules as the coordinator (restart them after a change; "
                         "`shelly doctor` names a worker of another config), then run again")
                return await self._end(claim.lease, self._sink(claim.lease), self._life(claim.lease.record), None,
                                       DelegateEntry(agent=claim.lease.record.agent, error=error))
        lease = claim.lease
        if lease is None:
            return Progress("skipped", claim.outcome)
        record = lease.record
        sink = self._sink(lease)
        life = self._life(record)
        if claim.outcome == "exhausted":
            error = (f"run {run_id}: failed after {claim.detail} attempts without progress "
                     f"(its step keeps killing workers)")
            return await self._end(lease, sink, life, None, DelegateEntry(agent=record.agent, error=error))
        # Stopped before it started, or its tree canceled (both read with the claim): a child still
        # begins (its start reported, its board task claimed) and ends at once, as an embedded child
        # stopped then does; a root just ends.
        stop = TASK_CANCELED if claim.outcome == "canceled" else record.stop if not record.state or life else ""
        if stop and life is None:
            return await self._end(lease, sink, None, None, Stop(stop))
        task = asyncio.current_task()
        assert task is not None
        self.cancel_watch.track(record.root, task)  # type: ignore[arg-type]
        self.cancel_watch.track(record.id, task)  # type: ignore[arg-type]  # policy: sibling stops
        metrics.RUNS_IN_FLIGHT.inc()
        try:
            async with lease.heartbeat(task):  # type: ignore[arg-type]
                with acting_as(session=record.session, run=record.id), run_span(record), routed_to(sink):
                    return await self._advance(lease, sink, life, stop)
        except LeaseLost as exc:
            logger.warning("run %s: %s; abandoned (another worker carries it on)", run_id, exc)
            return Progress("abandoned", str(exc))
        except asyncio.CancelledError:
            if not lease.lost:
                raise
            task.uncancel()
            logger.warning("run %s: lease lost mid-step; abandoned (another worker carries it on)", run_id)
            return Progress("abandoned", "lease lost")
        except StoreError:
            # Redis failed under us: the journal holds everything up to the last checkpoint. Journal
            # a held final reply if Redis answers again (so the retry does not ask the model twice),
            # and give the lease back so the retry need not wait it out.
            with contextlib.suppress(Exception):
                await lease.write_held()
            with contextlib.suppress(Exception):
                await lease.drop()
            raise
        finally:
            metrics.RUNS_IN_FLIGHT.dec()
            with contextlib.suppress(StoreError):
                await sink.flush()

    def _life(self, record: RunRecord) -> ChildLife | None:
        """The life of a delegated child's run (``None`` for a root, or for a request the journal
        cannot parse: that run then ends as a root would)."""
        if not record.request:
            return None
        try:
            request = ChildRequest.model_validate_json(record.request)
        except ValueError:
            return None
        return ChildLife(request, record.id, worker=self.hostname, session=record.session)

    def _sink(self, lease: Lease) -> StreamSink:
        return StreamSink(self.journal.client, self.journal.keys, lease.record.session,
                          retention=self.settings.retention)

    async def _advance(self, lease: Lease, sink: StreamSink, life: ChildLife | None, stop: str) -> Progress:
        """Rebuild the run and step it until it ends or must wait; a child through its
        :class:`~shelly_dist.agent.children.ChildLife` (begun, stepped inside its scope, ended on
        every exit). ``stop``: why it is stopped already (read with the claim), or ``""``."""
        record = lease.record
        request = life.request if life is not None else None
        try:
            run = await self._rebuild(record, sink, life)
        except (AgentError, ConfigError, UsageError) as exc:  # unknown agent, bad journal: fail, don't loop
            result = Stop(stop) if stop else DelegateEntry(agent=record.agent, error=str(exc))
            return await self._end(lease, sink, life, None, result)
        agent = run.agent
        if request is not None:  # blocking delegation: request_input is answered from the context
            agent.options.request_input = suspend_question if request.asks_parent() else auto_answer(request.context)
        offset = record.msg_count
        canceled = False
        if offset == 0:  # "started on <worker>" shows within a moment, or with the first write if that is sooner
            sink.flush_soon(STARTED_EVENTS_DELAY)

        rewrites = agent.chat.rewrites  # the rebuild's own replace_all is journaled already

        async def checkpoint(r: Run, reason: str) -> None:
            # One round trip: the new messages, the state, the step's events, and the cancel flag.
            # After an effect rewrote the chat (compaction, trimming), the whole chat replaces the
            # journaled one instead, so a rebuild anywhere continues from the rewritten chat.
            nonlocal offset, canceled, rewrites
            if reason == "suspended":
                wait = r.state.model_wait
                r.emit(events.RUN_WAITING, waiting_on=len(r.missing()) + len(r.state.awaiting),
                       **({"model": wait.reason or wait.kind} if wait is not None else {}))
            rewrite = r.agent.chat.rewrites != rewrites
            new = list(r.agent.chat.view(0 if rewrite else offset))
            if reason == "reply" and r.state.phase == Phase.DONE and not rewrite:
                # The final reply, no tool ran: written with the finish (a crash before it redoes
                # only the model call, as a crash during the call would). The step's events wait too.
                lease.hold(offset, r.state, new)
                return
            await sink.settle()
            offset, canceled = await lease.checkpoint(offset, r.state, new, RunStatus.RUNNING, sink.drain(),
                                                      rewrite=rewrite)
            rewrites = r.agent.chat.rewrites

        async def before_model(r: Run) -> None:
            # Both flags come with the claim and every checkpoint; a cancel or a sibling's stop that
            # lands in between reaches the in-flight step through CancelWatch.
            if canceled:
                raise RunCancelled(f"run {record.id}: canceled", run_id=record.id)
            if request is not None and record.stop:  # policy: a failed sibling (fail-fast) stops this run
                raise SiblingFailed(record.stop, run_id=record.id)

        run.checkpoint = checkpoint
        run.before_model = before_model
        run.delegator = _WorkerDelegator(self, lease)
        run.inbox = RedisInbox(self.journal.client, self.journal.keys, lambda: lease.record.steer)
        if life is not None:
            life.board = agent.options.task_board if life.request.task_id else None
            if (refused := await life.begin(run, parent_run=record.parent, fresh=not record.state)) is not None:
                return await self._end(lease, sink, life, run, refused)  # the task is not its to settle
        if stop:
            # stopped before it started or while it waited (a failed sibling; its interactive
            # delegation closed; its tree canceled): it ends here as if stopped mid-step, its task
            # settled on the board and its own children closed
            return await self._end(lease, sink, life, run, Stop(stop))
        try:
            while True:
                if run.state.model_wait is not None:  # its model call is suspended: a reply, or due?
                    await model_waits.collect(self.journal.client, self.journal.keys, run)
                    if run.model_waiting():
                        if await model_waits.suspend(lease, run):
                            wait = run.state.model_wait
                            return Progress("waiting", f"model call: {wait.reason or wait.kind}")
                        continue  # its reply was delivered meanwhile
                if run.state.phase == Phase.SUSPENDED and run.waiting():
                    await questions.register(lease, run)  # decisions: counted in pending before release
                    if parent := await interactive.ask_parent(lease, run):  # request_input to the parent
                        await enqueue_resume(self.journal, self.enqueue, parent)
                    await self._collect(record, run)
                    await questions.collect(lease, run)
                    await interactive.collect(lease, run)
                    if run.waiting():
                        left = await lease.release()
                        if left > 0:
                            return Progress("waiting", f"{left} children pending")
                        continue
                metrics.STEPS.labels(record.agent).inc()
                if error := spawns.timed_out(request):  # a spawned child out of time fails, announced
                    return await self._end(lease, sink, life, run, DelegateEntry(agent=record.agent, error=error))
                async with asyncio.timeout(spawns.time_left(request, self.settings.step_time_limit)), \
                        (life.scope() if life is not None else contextlib.nullcontext()):
                    outcome = await run.step()
                if isinstance(outcome, Finished):
                    if await self._steered_at_end(lease, run):  # a person spoke during its last call
                        continue
                    waits = await self._spawn_wait(lease, run)
                    if waits == "go":  # announcements of spawned children: another step with them
                        continue
                    if waits == "wait":
                        return Progress("waiting", "spawned children pending")
                    entry = entry_from_outcome(record.agent, reply=outcome.reply, completion=outcome.completion)
                    return await self._end(lease, sink, life, run, entry, reply=outcome.reply.text_content())
                if isinstance(outcome, Suspended):
                    continue
        except asyncio.CancelledError:
            if lease.lost:
                raise
            stop = await self.policy.stop_reason(record.id)  # policy: a sibling's failure
            if not stop and not await self.journal.is_canceled(record.root):
                raise
            return await self._end(lease, sink, life, run, Stop(stop or TASK_CANCELED))
        except RunCancelled as exc:  # the tree's cancel flag, a sibling's stop, the board's cancel
            reason = entry_from_outcome(record.agent, error=exc).error or TASK_CANCELED
            return await self._end(lease, sink, life, run, Stop(reason))
        except (StoreError, LeaseLost):
            raise  # not the run's fault: the task retries from the journal, or another worker has it
        except TimeoutError:
            if spawn_error := spawns.timed_out(request):
                return await self._end(lease, sink, life, run, DelegateEntry(agent=record.agent, error=spawn_error))
            error = StepTimeout(
                f"run {record.id}: step exceeded its time limit of {self.settings.step_time_limit:g}s",
                run_id=record.id,
            )
            return await self._end(lease, sink, life, run, entry_from_outcome(record.agent, error=error), raised=True)
        except Exception as exc:
            logger.info("run %s (%s) failed: %s", record.id, agent.name, exc)
            entry = entry_from_outcome(record.agent, error=exc, instance=agent.name,
                                       max_iterations=agent.options.max_iterations)
            return await self._end(lease, sink, life, run, entry, raised=True)

    async def _rebuild(self, record: RunRecord, sink: StreamSink, life: ChildLife | None) -> Run:
        """The run as its journal holds it: continued (``run_resumed``), or started afresh — a child
        spawned and named by its life (which reports its start when it begins), a root started here."""
        registry = await self.registry(record.session)
        request = life.request if life is not None else None
        if record.state:
            state = RunState.model_validate_json(record.state)
            state.messages = await self.journal.messages(record.id, record.msg_count)
            run = Run.rebuild(registry, state)
            counted = metrics.counting_tools(sink)
            run.agent.options.on_event = (counted if life is None
                                          else children.progress_sink(counted, life.parent, run.agent.name))
            run.emit(events.RUN_RESUMED, worker=self.hostname, step=state.iteration)
            return run
        agent = registry.spawn(record.agent, record.depth)
        if life is not None and request is not None:
            n = record.instance_n or await self.journal.next_instance(record.session, request.spawned())
            life.spawn(agent, n, metrics.counting_tools(sink))
            run = Run.start_child(agent, request, run_id=record.id, history=await self._history(request))
        else:
            agent.options.on_event = metrics.counting_tools(sink)
            first = (await self.journal.input_messages(record)) or [Message.text("user", Role.USER, record.task)]
            run = Run.start(agent, first, run_id=record.id, priority=record.priority or None,
                            share=record.share or None)
            children.started(run, parent=record.parent, task=record.task, worker=self.hostname)
        metrics.RUNS_STARTED.labels(record.agent).inc()
        return run

    async def _history(self, request: ChildRequest) -> list[Message] | None:
        """The chat of the run a team member's turn continues (its previous turn), if any."""
        if not request.history:
            return None
        previous = await self.journal.record(request.history)
        return await self.journal.messages(request.history, previous.msg_count) if previous else None

    async def _hand_off(self, lease: Lease, sink: StreamSink, run: Run, end: End) -> Progress:
        """The child handed its delegation off: end its run and start the peer's on the same entry."""
        record, peer = lease.record, end.peer
        assert peer is not None
        await lease.write_held()  # the reply that handed off: journaled before the run ends
        await sink.settle()
        for event in end.events:
            sink(event)
        peer_id, queued = await hand_off(lease, peer, children.handoff_entry(peer), events=sink.drain(),
                                         end=RunEnd(usage=run.state.usage.model_dump_json(), instance=run.agent.name))
        metrics.RUNS_FINISHED.labels(record.agent, "done").inc()
        if queued:
            await self.enqueue(RUN_AGENT, [peer_id, record.root],
                               task_kwargs(peer.spawned(), peer.depth, record.session, peer.task))
            run.emit(events.RUN_QUEUED, child_run=peer_id, child_agent=peer.spawned(), depth=peer.depth,
                     task=peer.task[:200])
        return Progress("done", f"handed off to {peer.spawned()} ({peer_id})")

    async def _steered_at_end(self, lease: Lease, run: Run) -> bool:
        """A run about to finish with its plain reply whose inbox holds a message it has not taken
        is reopened (another step, with the message) instead. The count its last checkpoint read is
        fresh unless its final reply was held to ride with the finish; then it is read once more,
        when a steering hint for it was heard (``children/steering.py``)."""
        fresh = lease.held is not None and self.cancel_watch.steered(lease.record.id)
        if not run.steerable_at_end() or not await run.inbox.unread(run, fresh=fresh):  # type: ignore[union-attr]
            return False
        lease.held = None  # discarded: the checkpoint below writes the same reply with the reopened state
        run.reopen()
        assert run.checkpoint is not None
        await run.checkpoint(run, "tools")
        return True

    async def _spawn_wait(self, lease: Lease, run: Run) -> str:
        """A run that spawned children and would finish: ``go`` (announcements wait: step again),
        ``wait`` (suspended until the next one, holding no worker) or ``done`` (finish)."""
        if not run.state.spawned:
            return "done"
        lease.held = None  # discarded: the checkpoint below writes the same reply with the reopened state
        run.reopen()
        assert run.checkpoint is not None
        await run.checkpoint(run, "tools")
        waits = await spawns.suspend(self.journal, lease, run.state.announced)
        if waits == "done":
            run.state.phase = Phase.DONE
        elif waits == "wait":
            run.emit(events.RUN_WAITING, waiting_on=run.state.spawned - run.state.announced)
        return waits

    async def _collect(self, record: RunRecord, run: Run) -> None:
        """Deliver every child entry that has joined into this run's record."""
        iteration = run.state.iteration
        wanted = {child_key(r, iteration): r for r in run.missing()}
        for key, entry in (await self.journal.children(record.id, list(wanted))).items():
            run.deliver(wanted[key].key, entry)

    async def _end(
        self,
        lease: Lease,
        sink: StreamSink,
        life: ChildLife | None,
        run: Run | None,
        result: DelegateEntry | Stop,
        *,
        raised: bool = False,
        reply: str = "",
    ) -> Progress:
        """End the run with ``result`` — every exit of a run's advance comes here, a child's through
        its :class:`~shelly_dist.agent.children.ChildLife` (entry, handoff, board, end events) —
        then what only the pool does: the wake's end, fail-fast, the spawned runs, the finish and
        the join into the parent (DESIGN §6)."""
        record = lease.record
        if life is not None:
            end = await life.end(run, result, raised=raised)
            if end.peer is not None and run is not None:
                return await self._hand_off(lease, sink, run, end)
        else:
            entry, ending = children.settled(result, record.agent, raised=raised)
            usage = run.state.usage.model_dump() if run else {}
            end = End(entry, ending, [children.finished(run.agent.name if run else record.agent, record.id,
                                                        ending=ending, entry=entry.to_json(), usage=usage,
                                                        worker=self.hostname, session=record.session)])
            if run is not None:
                entry.usage = run.state.tree_usage
        entry, status = end.entry, end.ending
        if run is not None:  # its interactive children still waiting are cancelled
            await run.close()
        ended = RunEnd(usage=run.state.usage.model_dump_json() if run is not None else "",
                       instance=run.agent.name if run is not None else "", reply=reply or "",
                       error=entry.error or "")
        for event in end.events:
            sink(event)
        if is_wake_run(record.id, record.depth) and isinstance(self.ctx, TeamContext):  # a team's wake
            await self.ctx.wake_ended(record, status, reply=reply, error=entry.error or "")
        await self.policy.on_end(record.parent, record.parent_key,  # policy: fail-fast
                                 life.request if life is not None else record.request, entry)
        if status == Ending.CANCELED:  # its spawned runs go with it
            await spawns.stop_spawned(self.journal, record.id)
        resume = False
        if spawns.is_spawned(record):  # announced before the finish: a crash between repeats neither
            resume = await spawns.announce(self.journal, record, status, entry, run.state.iteration if run else 0)
        await sink.settle()
        await finish_and_join(self.journal, self.enqueue, lease, status, entry, events=sink.drain(), end=ended)
        if resume:
            await enqueue_resume(self.journal, self.enqueue, record.parent)
        metrics.RUNS_FINISHED.labels(record.agent, status).inc()
        return Progress(status, entry.error or "")


def run_span(record: RunRecord) -> contextlib.AbstractContextManager[Any]:
    """This advance's ``invoke_agent`` span, under the parent's ``execute_tool delegate`` span
    journaled in the child's request: a resume is marked ``shelly.resumed``, a claim of a state
    an earlier attempt did not get past (a redelivery, a reaped run) ``shelly.retry``."""
    parent = json.loads(record.request).get("trace") if record.request else None
    return tracing.invoke_agent(record.agent, record.id, session=record.session, parent=parent,
                                resumed=bool(record.state), retry=record.attempts > 1)


async def generation_alive(journal: Journal, fingerprint: str) -> bool:
    """Whether a worker serving config ``fingerprint`` was seen lately (its reaper registers it)."""
    with redis_errors("journal"):
        seen = await journal.client.zscore(journal.keys.generations(), fingerprint)
    return seen is not None and time.time() - float(seen) < GENERATION_GRACE


class _WorkerDelegator:
    """Dispatches children as Celery tasks and suspends the parent (never waits on them)."""

    def __init__(self, executor: Executor, lease: Lease) -> None:
        self.executor = executor
        self.lease = lease
        self.spawner = spawns.PoolSpawner(executor.journal, executor.enqueue, lease, executor.ctx.fingerprint)
        """The run's ``spawn`` children: Celery tasks; it suspends rather than waits for them."""

    async def delegate(self, parent: Run, requests: list[ChildRequest]) -> list[DelegateEntry] | None:
        await dispatch_children(self.executor.enqueue, self.lease, requests, parent.state.iteration,
                                self.executor.ctx.fingerprint, parent)
        return None

    async def answer(self, parent: Run, delegations: list[LiveDelegation], answers: list[str]) -> None:
        """Answer the waiting children and suspend until each has asked again or ended."""
        due = await interactive.send_answers(self.lease, delegations, answers, parent.state.iteration,
                                             limit=parent.agent.options.question_timeout)
        await resume_each(self.executor.journal, self.executor.enqueue, due)

    async def close(self, parent: Run) -> None:
        due = await interactive.close(self.lease, list(parent.state.delegations.values()))
        await resume_each(self.executor.journal, self.executor.enqueue, due)
