"""The coordinator: the top-level agent runs here, in asyncio; its children run on the pool.

``shelly run`` with a broker configured executes the entry agent in its own process. Each
``delegate`` registers the children in the run journal, sends them as Celery tasks and awaits their
entries through Redis — a subscription to the run's channel for the wake-up, a re-read of the
children hash for the truth — never ``AsyncResult.get()`` (DESIGN §3 rules 5 and 6). Events of the
remote runs come back through the session stream and are replayed into the caller's event sink,
so the live view shows the whole tree. Cancelling the awaiting task (Ctrl-C) cancels the tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any

from shelly_dist import identity
from shelly_dist.agent import Agent, ChildRequest, DelegateEntry, Run
from shelly_dist.agent.children import Ending
from shelly_dist.agent.records import LiveDelegation
from shelly_dist.agent.root_life import root_finished, root_started, task_of
from shelly_dist.agent.steering import SteerMessage
from shelly_dist.chats import Message, Role
from shelly_dist.errors import RunCancelled, RunNotFound, UsageError
from shelly_dist.events import Event, EventSink
from shelly_dist.identity import acting_as
from shelly_dist.redisio.blocking import read_through
from shelly_dist.redisio.connection import connect, redis_errors
from shelly_dist.redisio.hub import Hub, Watch
from shelly_dist.redisio.refusal import NOTICE, probe_writes
from shelly_dist.redisio.sharded import check_sharded_pubsub
from shelly_dist.runtime.base import RunOutcome, check_run_id
from shelly_dist.runtime.celery.broker import create_app, ensure_broker, run_task_sender
from shelly_dist.runtime.celery.children import interactive, model_waits
from shelly_dist.runtime.celery.children.cancel import cancel_session, cancel_tree
from shelly_dist.runtime.celery.children.dispatch import dispatch_children
from shelly_dist.runtime.celery.children.join import enqueue_resume, resume_each
from shelly_dist.runtime.celery.children.questions import (
    Answered,
    answer,
    open_decisions,
    open_questions,
    require_open,
)
from shelly_dist.runtime.celery.children.spawns import PoolSpawner
from shelly_dist.runtime.celery.children.steering import RedisInbox, live_runs, post
from shelly_dist.runtime.celery.client.root_answerer import RootAnswerer
from shelly_dist.runtime.celery.client.roots import RootWaiter
from shelly_dist.runtime.celery.client.tail import Tail
from shelly_dist.runtime.celery.client.tree_end import until_tree_ended
from shelly_dist.runtime.celery.journal import Journal, Lease, RunEnd, RunRecord, RunStatus, child_key
from shelly_dist.runtime.celery.journal.record import LIVE
from shelly_dist.runtime.celery.journal.stream import StreamSink, routed_to
from shelly_dist.runtime.celery.names import RUN_AGENT, task_kwargs
from shelly_dist.runtime.celery.settings import RuntimeSettings
from shelly_dist.runtime.local.steering import LiveRun

logger = logging.getLogger(__name__)

NO_WORKER_HINT = 30.0
WRITE_PROBE_EVERY = 2.0
"""Seconds between two probes, while the coordinator waits, of whether Redis takes writes (a full
Redis still answers every read the wait makes, so only a write tells; see ``redisio/refusal.py``)."""
"""Seconds after which a coordinator whose children have not started says why it may be waiting."""

CONNECTIONS = 8
"""Connections the process's client may open (a blocking pool: past it, a command waits for a free
one). A batch submitting and waiting for 10,000 roots needs a handful at a time: its waits share one
reader (:class:`RootWaiter`) and its wake-ups one pub/sub connection (from this pool too)."""

ANNOUNCED_FINISH_WAIT = 2.0
"""Seconds a coordinator's root waits, before hearing a spawned child's announcement, for that
child's finish (written just after it) so the live view shows the child's end first."""
ANNOUNCED_FINISH_POLL = 0.02

SUBMIT_OUTAGE = 60.0
"""Seconds a submission waits out a Redis that does not answer before it fails."""

def _tee(*sinks: EventSink | None) -> EventSink:
    live = [s for s in sinks if s is not None]

    def sink(event: Event) -> None:
        for s in live:
            s(event)

    return sink


class CeleryRuntime:
    """Runs top-level agents in this process and their delegations on the worker pool."""

    name = "celery"

    def __init__(self, settings: RuntimeSettings, fingerprint: str) -> None:
        self.settings = settings
        self.fingerprint = fingerprint
        self.app = create_app(settings)
        self.client = connect(settings.redis_url, client_name="shelly-coordinator", max_connections=CONNECTIONS)
        self.journal = Journal(self.client, settings)
        self.sender = run_task_sender(self.app, settings.queue, client_name="shelly-coordinator-send")
        """Sends the runs' tasks: one ``LPUSH`` per fan-out on a Redis broker (``fast_send``)."""
        self._broker_checked: asyncio.Task[None] | None = None
        self._hub: Hub | None = None
        self._roots: RootWaiter | None = None
        self._roots_loop: asyncio.AbstractEventLoop | None = None
        self.answerer = RootAnswerer(settings.poll_interval)
        """Answers the ``ask_user`` questions of the top-level runs this process drives, through
        Redis (the engine uses it when no terminal answers)."""

    def hub(self) -> Hub:
        """The process's one pub/sub connection for its runs' wake-ups (per event loop): a top-level
        run no longer opens a connection of its own to wait for its children (issue 16)."""
        loop = asyncio.get_running_loop()
        if self._hub is None or self._hub.loop is not loop:
            self._hub = Hub(self.client, self.settings.poll_interval, tree=True)  # run_changed / run_ended only
        return self._hub

    async def _check_broker(self) -> None:
        """Before this process's first run: a Redis or a broker that cannot be reached fails that
        run at once with its error (one line at the CLI), before anything is written; later sends
        outlast a broker that goes away (:func:`send_run_task`). Checked once per process."""
        if self._broker_checked is None or (self._broker_checked.done() and self._broker_checked.exception()):
            self._broker_checked = asyncio.ensure_future(self._reachable())
        await asyncio.shield(self._broker_checked)

    async def check(self) -> None:
        """Raise now when Redis or the broker cannot be reached (what a batch checks before it
        submits its first item); checked once per process, like every run's first send."""
        await self._check_broker()

    async def _reachable(self) -> None:
        # Redis first: with one Redis as both broker and store, its error names the store setting.
        with redis_errors("coordinator"):
            await self.client.ping()
            await check_sharded_pubsub(self.client)  # a cluster's tree channels need 7.0+
        await asyncio.to_thread(ensure_broker, self.app)

    async def _send(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> None:
        took = await self.sender(name, args, kwargs)
        await self.journal.sent(args[1], args[0], took)

    # -- top-level runs in this process --------------------------------------------------------

    async def execute(
        self, agent: Agent, messages: list[Message], *, session: str, run_id: str | None = None
    ) -> RunOutcome:
        await self._check_broker()
        run_id = run_id or uuid.uuid4().hex[:12]
        task = task_of(messages)
        lease = await self.journal.open_root(run_id, agent=agent.config_name, session=session, task=task,
                                             fingerprint=self.fingerprint)
        stream = StreamSink(self.client, self.journal.keys, session, retention=self.settings.retention)
        local = agent.options.on_event
        agent.options.on_event = _tee(local, stream)
        tail = Tail(self.client, self.journal.keys, session, run_id, local) if local else None

        # The cancel flag rides on the checkpoint that ends a tools step (its event flush reads it
        # in the same round trip), the last journal write before the next model call; a model call
        # that no such checkpoint preceded (the first, or one after a flush with nothing to write)
        # reads it on its own, as every model call did before (issue 16).
        # The steering count rides with it both ways: read before each model call, it is what the
        # run's inbox knows when it drains; after the reply it is stale (unknown: read when asked).
        flag: list[bool | None] = [None]
        steer: list[int | None] = [None]
        record_key = self.journal.keys.run(run_id)

        async def flush(r: Run, reason: str) -> None:
            if reason != "tools":
                if reason == "reply":
                    steer[0] = None
                await stream.flush()
                return
            read = await stream.flush_reading_fields(record_key, ["canceled", "steer"])
            flag[0] = None if read is None else read[0] == "1"
            steer[0] = None if read is None else int(read[1] or 0)

        async def before_model(r: Run) -> None:
            canceled, flag[0] = flag[0], None
            if canceled is None:  # a read, safe to repeat: a Redis restarting under the run is waited out
                with redis_errors("coordinator"):
                    raw_canceled, raw_steer = await read_through(
                        "coordinator", lambda: self.client.hmget(record_key, ["canceled", "steer"]))
                canceled, steer[0] = raw_canceled == "1", int(raw_steer or 0)
            if canceled:
                raise RunCancelled(f"run {run_id}: canceled", run_id=run_id)

        awaiter = _Awaiter(self, lease, stream, tail)
        self.answerer.attach(lease, agent.options.on_event, stream.flush)
        run = Run.start(agent, messages, run_id=run_id, delegator=awaiter, checkpoint=flush, before_model=before_model)
        run.inbox = RedisInbox(self.client, self.journal.keys, lambda: steer[0])
        status, error = Ending.FAILED, ""
        root_started(run, task)
        ended: dict[str, Any] = {}
        try:
            with acting_as(session=session), routed_to(stream):  # its workspace's events in order with its own
                reply = await agent.execute(run)
                ended["reply"] = reply
                if run.state.spawned:
                    await awaiter.spawner.settle()  # detached children end before the tree does
                # Children it stopped (closed or timed-out interactive ones) too, as embedded.
                await until_tree_ended(self.client, self.journal.keys, run_id, awaiter.watch)
            status = Ending.DONE
            return RunOutcome(run_id=run_id, reply=reply, usage=run.state.usage, completion=run.state.completion,
                              tree_usage=run.state.tree_usage)
        except (asyncio.CancelledError, RunCancelled) as exc:
            status, error = Ending.CANCELED, "canceled"
            ended = {"error": exc}
            await asyncio.shield(cancel_tree(self.client, self.journal.keys, run_id))
            raise
        except Exception as exc:
            error, ended = str(exc), {"error": exc}
            raise
        finally:
            root_finished(run, **ended)  # before the close's flush: in the stream with the rest
            self.answerer.detach(run_id)
            await awaiter.aclose()
            with contextlib.suppress(Exception):
                await asyncio.shield(self._close_root(lease, status, error, run, stream))
            if tail is not None:
                await tail.close(drain=status != Ending.CANCELED)

    async def _close_root(self, lease: Lease, status: Ending, error: str, run: Run, stream: StreamSink) -> None:
        await stream.flush()
        entry = DelegateEntry(agent=lease.record.agent, error=error or None)
        await lease.finish(status, entry.to_json(), end=RunEnd(usage=run.state.usage.model_dump_json(), error=error))

    # -- root runs on the pool (batch) ---------------------------------------------------------

    async def submit(
        self, agent: str, task: str | list[Message], *, session: str, run_id: str | None = None, batch: str = ""
    ) -> str:
        """Start ``agent`` on ``task`` (a text, or the user messages) as a root run on the pool;
        returns its run id. The run never touches this process again. ``batch``: the identity of
        the batch the run is an item of, kept for the session (what ``--batch`` filters decisions
        by, and the scope of a batch's ``--always`` verdicts).

        A given ``run_id`` is an idempotency key: when a run is already recorded under it, nothing
        is created, and it is sent again only while still ``queued`` (the first send may have died
        with the process that made it; a duplicate delivery is harmless, one claim starts it)."""
        if run_id is not None:
            check_run_id(run_id, "submit")
        await self._check_broker()
        explicit = run_id is not None
        run_id = run_id or uuid.uuid4().hex[:12]
        messages = [Message.text("user", Role.USER, task)] if isinstance(task, str) else task
        task = messages[-1].text_content() if messages else ""
        tier = "" if identity.priority() == "interactive" else identity.priority()  # the context's (a batch's)
        if batch:  # before the run exists: its first decision finds it
            key = self.journal.keys.session_batch(session)
            await read_through("submit", lambda: self.client.set(key, batch, ex=self.settings.retention),
                               until=time.monotonic() + SUBMIT_OUTAGE)
        # Safe to repeat (the same record, indexed with NX), so a Redis outage is waited out.
        created = await read_through(
            "submit", lambda: self.journal.create_root(run_id, agent=agent, session=session, mode="worker", task=task,
                                                       fingerprint=self.fingerprint, messages=messages,
                                                       if_absent=explicit, priority=tier,
                                                       share=identity.share()),
            until=time.monotonic() + SUBMIT_OUTAGE)
        if not created:
            record = await self.journal.record(run_id)
            if record is None or record.status != RunStatus.QUEUED:
                return run_id
            agent, session = record.agent or agent, record.session or session
        await self._send(RUN_AGENT, [run_id, run_id], task_kwargs(agent, 0, session, task))
        return run_id

    async def provider_batches(self, session: str) -> None:
        """Send the model calls of ``session``'s runs through their providers' batch APIs (``shelly
        batch --provider-batch``): a flag the workers' batch layer reads once per session."""
        key = self.journal.keys.session_meta(session)
        with redis_errors("submit"):
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.hset(key, "provider_batch", "1")
                pipe.expire(key, self.settings.retention)
                await pipe.execute()

    async def record(self, run_id: str) -> RunRecord | None:
        """The run's record as it is now (``None`` when there is none)."""
        return await self.journal.record(run_id)

    async def wait(self, run_id: str, timeout: float | None = None) -> RunRecord:  # noqa: ASYNC109
        """The run's record once it has ended.

        The wake-ups come through the process's one pub/sub connection (:meth:`hub`): a batch
        waits for thousands of runs, and a subscription each cost a TCP connect, ``SUBSCRIBE`` and
        close per run (issue 27). They come on the run's ``ended`` channel, not ``changed``, which
        also carries a message per child's join: a root on the pool with 200 children was re-read
        200 times as its record grew with their results. Every waited run shares one reader
        (:meth:`roots`), which reads what a message names, not every run on every poll tick."""
        return await self.roots().wait(run_id, timeout)

    def roots(self) -> RootWaiter:
        """The process's wait for its root runs' ends (per event loop): it costs what ends, not what
        waits (:mod:`..client.roots`; ``shelly batch`` waits for thousands)."""
        loop = asyncio.get_running_loop()
        if self._roots is None or self._roots_loop is not loop:
            self._roots, self._roots_loop = RootWaiter(self.client, self.journal.keys, self.hub), loop
        return self._roots

    # -- decisions (ask_user, approvals) and steering -------------------------------------------

    async def questions(self, session: str) -> list[dict[str, Any]]:
        """The session's open ``ask_user`` questions (id, agent, run, text, options, …)."""
        return await open_questions(self.client, self.journal.keys, session)

    async def decisions(self, session: str | None = None) -> list[dict[str, Any]]:
        """Every open decision of the pool (of ``session`` when given), oldest first, in the shape
        of docs/reference.md ("Decisions"); O(pending) reads."""
        return await open_decisions(self.client, self.journal.keys, session=session)

    async def respond(self, session: str, question_id: str, text: str, *, by: str = "",
                      what: str = "answer") -> Answered:
        """Answer decision ``question_id`` of ``session`` from this process (a question with
        ``text``, an approval with a verdict's text): the answer is stored in Redis and the asking
        run resumed (on any worker, or its coordinator woken). A decision that is not open is a
        ``UsageError`` (``what`` names the command in it)."""
        s = self.settings
        found = await answer(self.client, self.journal.keys, session, question_id, text, retention=s.retention,
                             requeue_after=s.requeue_after, by=by)
        require_open(found, question_id, session, what)
        if found.resume:
            await enqueue_resume(self.journal, self._send, found.run)
        return found

    async def try_respond(self, session: str, question_id: str, text: str, *, by: str = "") -> bool:
        """:meth:`respond`, but a decision answered meanwhile (or whose run ended) is ``False``,
        not an error: what deciding many at once, or a prompt that lost a race, wants."""
        s = self.settings
        found = await answer(self.client, self.journal.keys, session, question_id, text, retention=s.retention,
                             requeue_after=s.requeue_after, by=by)
        if found.resume:
            await enqueue_resume(self.journal, self._send, found.run)
        return found.outcome == "ok"

    async def live_runs(self, session: str) -> list[LiveRun]:
        """The runs of ``session`` that have not ended (what ``steer`` may address)."""
        return await live_runs(self.client, self.journal.keys, session)

    async def steer(self, session: str, run_id: str, message: SteerMessage) -> int:
        """Put ``message`` in run ``run_id``'s inbox; it joins the run's chat before its next
        model call, on any worker. How many messages the inbox holds. A run that has ended (or
        never existed) is a ``UsageError``."""
        outcome, n = await post(self.client, self.journal.keys, run_id, message, retention=self.settings.retention)
        if outcome in ("ended", "missing"):
            why = "has ended" if outcome == "ended" else "is not recorded"
            raise UsageError(f"steer: run {run_id} of session {session} {why}: nothing was delivered")
        return n

    async def cancel(self, run_id: str) -> list[str]:
        record = await self.journal.record(run_id)
        if record is None:
            raise RunNotFound(f"run {run_id}: not found", run_id=run_id)
        return await cancel_tree(self.client, self.journal.keys, record.root)

    async def cancel_session(self, session: str) -> list[str]:
        return await cancel_session(self.client, self.journal.keys, session)

    async def aclose(self) -> None:
        if self._roots is not None:
            await self._roots.aclose()
        if self._hub is not None:
            with contextlib.suppress(Exception):
                await self._hub.aclose()
        await self.sender.aclose()
        await self.client.aclose()
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.app.close)


class _Awaiter:
    """The coordinator's delegator: dispatch the children, then await their entries in Redis."""

    def __init__(self, runtime: CeleryRuntime, lease: Lease, stream: StreamSink, tail: Tail | None = None) -> None:
        self.runtime = runtime
        self.lease = lease
        self.record = lease.record
        self.stream = stream
        self.tail = tail
        """The live view's feed of the children's events: caught up before the root goes on."""
        self._stack = contextlib.AsyncExitStack()
        self._wakeups: Watch | None = None
        self._opening = asyncio.Lock()
        self.spawner = PoolSpawner(runtime.journal, runtime._send, lease, runtime.fingerprint, watch=self._subscribed,
                                   shown=self._finishes_shown)
        """The root's ``spawn`` children: on the pool; the root waits for their announcements here."""

    async def watch(self) -> Watch:
        """The run's channel (see :meth:`_subscribed`)."""
        return await self._subscribed()

    async def _subscribed(self) -> Watch:
        """The run's channel on the process's shared pub/sub connection (one watch, shared by every
        ``delegate`` call of the run; several may wait at once): subscribed before the first child
        can possibly join. Its generation moves on each message and each poll interval; a waiter
        notes it *before* it reads Redis and waits for it to move, so no wake-up is lost."""
        async with self._opening:
            if self._wakeups is None:
                rt = self.runtime
                self._wakeups = await rt.hub().watch(rt.journal.keys.run_changed(self.record.id))
                self._stack.push_async_callback(self._wakeups.aclose)
            return self._wakeups

    async def wait_model(self, run: Run) -> None:
        """The root's model call is suspended: wait here (this process holds no worker) until it is
        due or its reply is delivered to the root's record, from any process."""
        rt = self.runtime
        await self.stream.flush()
        await model_waits.wait_in_coordinator(rt.client, rt.journal.keys, run, await self._subscribed())

    async def delegate(self, parent: Run, requests: list[ChildRequest]) -> list[DelegateEntry]:
        rt = self.runtime
        iteration = parent.state.iteration
        wakeups = await self._subscribed()
        ids = await dispatch_children(rt._send, self.lease, requests, iteration, rt.fingerprint, parent)
        await self.stream.flush()
        return await self._caught_up(await self._entries(wakeups, [child_key(r, iteration) for r in requests], ids))

    async def answer(self, parent: Run, delegations: list[LiveDelegation], answers: list[str]) -> list[DelegateEntry]:
        """Interactive delegation: answer the waiting children (resumed on any worker), then await
        each one's next entry (its next question, or its end) as a delegation's."""
        rt, iteration = self.runtime, parent.state.iteration
        wakeups = await self._subscribed()
        due = await interactive.send_answers(self.lease, delegations, answers, iteration,
                                             limit=parent.agent.options.question_timeout)
        await resume_each(rt.journal, rt._send, due)
        keys = [child_key(d.request, iteration) for d in delegations]
        entries = await self._entries(wakeups, keys, [d.reply_to.get("run", "") for d in delegations])
        return await self._caught_up(entries)

    async def _finishes_shown(self, runs: list[str]) -> None:
        """Before the root hears of its spawned children ``runs``: the live view shows their ends.
        A child is announced just before its finish is written (so a crash repeats neither), so
        this waits — :data:`ANNOUNCED_FINISH_WAIT` at most, a view's order never stalls a run —
        until each is recorded ended, then catches the view up."""
        if self.tail is None:
            return
        client, keys = self.runtime.client, self.runtime.journal.keys
        deadline = time.monotonic() + ANNOUNCED_FINISH_WAIT
        with contextlib.suppress(Exception):  # the view's order only: Redis failing here costs lines
            while time.monotonic() < deadline:
                async with client.pipeline(transaction=False) as pipe:
                    for run in runs:
                        pipe.hget(keys.run(run), "status")
                    statuses = await pipe.execute()
                if not any(s is not None and RunStatus.read(s) in LIVE for s in statuses):
                    break
                await asyncio.sleep(ANNOUNCED_FINISH_POLL)
        await self.tail.catch_up()

    async def _caught_up(self, entries: list[DelegateEntry]) -> list[DelegateEntry]:
        """Hand the root its children's entries only once the live view has shown their events
        (a child's events are in the stream before its entry joins): the view prints in causal
        order, the children's ends before the root's next step."""
        if self.tail is not None:
            await self.tail.catch_up()
        return entries

    async def close(self, parent: Run) -> None:
        """The root run ended: its interactive children still waiting end ``canceled``."""
        rt = self.runtime
        due = await interactive.close(self.lease, list(parent.state.delegations.values()))
        await resume_each(rt.journal, rt._send, due)

    async def _entries(self, wakeups: Watch, keys: list[str], ids: list[str]) -> list[DelegateEntry]:
        """Wait until an entry has joined under each of ``keys``.

        Reads only what it must: once at first (entries may have joined before the watch), then
        only when every missing entry has been announced (a join publishes ``child|<key>``), or
        when anything else moved the watch (a poll tick, an outage, a cancel, an answer) — so a
        fan-out of n children costs a read or two, not one per join. A read asks only for the
        entries still missing: an entry is written once (``HSETNX``), so one read stays valid."""
        rt, run_id = self.runtime, self.record.id
        hint_at: float | None = time.monotonic() + NO_WORKER_HINT
        probe_at = time.monotonic() + WRITE_PROBE_EVERY
        got: dict[str, DelegateEntry] = {}
        announced: set[str] = set()
        position, read = wakeups.position, True
        while True:
            seen = wakeups.generation
            if read:
                missing = [k for k in keys if k not in got]
                new, canceled = await read_through(
                    "coordinator", lambda missing=missing: rt.journal.joined(run_id, self.record.root, missing))
                got.update(new)
                if len(got) == len(keys):
                    return [got[k] for k in keys]
                if canceled:
                    raise RunCancelled(f"run {run_id}: canceled", run_id=run_id)
            if hint_at is not None and time.monotonic() > hint_at:
                hint_at = None
                await self._hint_if_unstarted(ids)
            if time.monotonic() > probe_at:
                probe_at = time.monotonic() + WRITE_PROBE_EVERY
                NOTICE.update(await probe_writes(rt.journal.client, rt.journal.keys.write_probe()))
            await wakeups.moved(seen)
            hints, position = wakeups.hints_since(position)
            joins = [h.split("|", 1)[1] for h in hints if h is not None and h.startswith("child|")]
            announced.update(joins)
            read = len(joins) < len(hints) or all(k in announced for k in keys if k not in got)

    async def _hint_if_unstarted(self, ids: list[str]) -> None:
        """Say so when no worker has picked any child up: the usual cause is no ``shelly worker``
        listening on this queue and broker (the run simply waits; nothing is lost)."""
        rt = self.runtime
        records = [await read_through("coordinator", lambda cid=cid: rt.journal.record(cid)) for cid in ids]
        statuses = [r.status if r else None for r in records]
        if statuses and all(s == "queued" for s in statuses):
            logger.warning(
                "delegate: no worker has started any of %d children after %.0fs; is `shelly worker` "
                "running for queue %r on this broker? (the run waits; Ctrl-C cancels it)",
                len(ids), NO_WORKER_HINT, rt.settings.queue,
            )

    async def aclose(self) -> None:
        await self._stack.aclose()


def open_runtime(settings: RuntimeSettings, fingerprint: str) -> CeleryRuntime:
    """The engine's entry point into the distributed runtime."""
    return CeleryRuntime(settings, fingerprint)
