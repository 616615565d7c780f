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
import json
import logging
import socket
import uuid
from collections.abc import Awaitable, Callable
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
    board_status,
    entry_from_outcome,
    instance_name,
)
from shelly_dist.chats import Message, Role
from shelly_dist.errors import AgentError, ConfigError, RunCancelled, StepTimeout, StoreError, UsageError
from shelly_dist.events import Event
from shelly_dist.identity import acting_as
from shelly_dist.runtime.celery.cancel import CancelWatch
from shelly_dist.runtime.celery.events import StreamSink
from shelly_dist.runtime.celery.journal import Journal, child_key
from shelly_dist.runtime.celery.settings import RuntimeSettings

logger = logging.getLogger(__name__)

RUN_AGENT = "shelly.run_agent"
RESUME_AGENT = "shelly.resume_agent"


class WorkerContext(Protocol):
    """What the engine gives a worker: the config's fingerprint and agents per session."""

    fingerprint: str

    def registry(self, session: str) -> Registry: ...

    async def aclose(self) -> None: ...


Enqueue = Callable[[str, list[Any], dict[str, Any]], Awaitable[None]]
"""Sends a task by name with args and kwargs (the Celery app's ``send_task``, off the loop)."""


def task_kwargs(record: dict[str, str]) -> dict[str, Any]:
    """What Flower shows of a run's task: agent, depth, session and a preview of the task."""
    return {
        "agent": record.get("agent", ""),
        "depth": int(record.get("depth") or 0),
        "session": record.get("session", ""),
        "preview": (record.get("task") or "")[:80],
    }


@dataclass
class Progress:
    """How one task's work on a run ended, for the task body and the logs."""

    outcome: str
    """``done``, ``failed``, ``canceled``, ``waiting``, ``busy`` (try again soon) or ``skipped``."""
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

    async def advance(self, run_id: str, root: str, *, session: str = "", agent: str = "") -> Progress:
        """Do all the work run ``run_id`` allows now. Safe to call twice for the same run.

        ``session`` and ``agent`` (the task's kwargs) let the claim number a fresh instance in the
        same round trip."""
        token = f"{self.hostname}:{uuid.uuid4().hex[:8]}"
        claim = await self.journal.claim(run_id, root, token, self.hostname, session=session, agent=agent)
        if claim.outcome in ("busy", "terminal", "missing"):
            return Progress("busy" if claim.outcome == "busy" else "skipped", claim.detail)
        record = claim.record or await self.journal.record(run_id)
        if not record:
            return Progress("skipped", "missing")
        sink = StreamSink(self.journal.client, self.journal.keys, record["session"], retention=self.settings.retention)
        if claim.outcome == "canceled":
            return await self._end(record, token, sink, "canceled", DelegateEntry(agent=record["agent"],
                                                                                  error="task canceled"))
        if claim.outcome == "exhausted":
            error = (f"run {run_id}: failed after {claim.detail} attempts without progress "
                     f"(its step keeps killing workers)")
            return await self._end(record, token, sink, "failed", DelegateEntry(agent=record["agent"], error=error))
        if record.get("fingerprint") and record["fingerprint"] != self.ctx.fingerprint:
            error = (f"run {run_id}: config fingerprint mismatch: the run has {record['fingerprint']}, "
                     f"worker {self.hostname} has {self.ctx.fingerprint}")
            return await self._end(record, token, sink, "failed", DelegateEntry(agent=record["agent"], error=error))
        task = asyncio.current_task()
        assert task is not None
        self.cancel_watch.track(record["root"], task)  # type: ignore[arg-type]
        try:
            with acting_as(session=record["session"]):
                return await self._advance(record, token, sink)
        except StoreError:
            # Redis failed under us: the journal holds everything up to the last checkpoint. Give
            # the lease back (when Redis answers) so the retry need not wait it out.
            with contextlib.suppress(Exception):
                await self.journal.drop_lease(run_id, token)
            raise
        finally:
            with contextlib.suppress(StoreError):
                await sink.flush()

    async def _advance(self, record: dict[str, str], token: str, sink: StreamSink) -> Progress:
        try:
            run, request = await self._rebuild(record, sink)
        except (AgentError, ConfigError, UsageError) as exc:  # unknown agent, bad journal: fail, don't loop
            return await self._end(record, token, sink, "failed", DelegateEntry(agent=record["agent"], error=str(exc)))
        agent = run.agent
        offset = int(record.get("msg_count") or 0)
        canceled = False
        if offset == 0:
            await sink.flush(expire=False)  # "started on <worker>" shows at once, not after the first model call

        async def checkpoint(r: Run, reason: str) -> None:
            # One round trip: the new messages, the state, the step's events, and the cancel flag.
            nonlocal offset, canceled
            if reason == "suspended":
                r.emit(events.RUN_WAITING, waiting_on=len(r.missing()))
            offset, canceled = await self.journal.checkpoint(
                record, offset, r.state, list(r.agent.chat.view(offset)), "running", sink.drain()
            )

        async def before_model(r: Run) -> None:
            # The flag comes with every checkpoint; a cancel that lands in between reaches the
            # in-flight step through CancelWatch.
            if canceled:
                raise RunCancelled(f"run {record['id']}: canceled", run_id=record["id"])

        run.checkpoint = checkpoint
        run.before_model = before_model
        run.delegator = _WorkerDelegator(self, record, sink)
        board = agent.options.task_board if request is not None and request.task_id else None
        if request is not None and board is not None and run.state.iteration == 0 and offset == 0:
            try:
                await board.claim(request.task_id, agent.name)  # type: ignore[arg-type]
            except Exception as exc:
                entry = DelegateEntry(agent=request.agent, error=f'failed to claim task "{request.task_id}": {exc}')
                return await self._end(record, token, sink, "failed", entry)
        try:
            while True:
                if run.state.phase == Phase.SUSPENDED and run.missing():
                    await self._collect(record, run)
                    if run.missing():
                        left = await self.journal.release(record["id"], token)
                        if left > 0:
                            return Progress("waiting", f"{left} children pending")
                        continue
                async with asyncio.timeout(self.settings.step_time_limit):
                    outcome = await run.step()
                if isinstance(outcome, Finished):
                    entry = entry_from_outcome(record["agent"], reply=outcome.reply, completion=outcome.completion)
                    return await self._end(record, token, sink, "done", entry, run=run, board=board, request=request,
                                           reply=outcome.reply.text_content())
                if isinstance(outcome, Suspended):
                    continue
        except asyncio.CancelledError:
            if not await self.journal.is_canceled(record["root"]):
                raise
            entry = DelegateEntry(agent=record["agent"], error="task canceled")
            return await self._end(record, token, sink, "canceled", entry, run=run, board=board, request=request)
        except RunCancelled:
            entry = DelegateEntry(agent=record["agent"], error="task canceled")
            return await self._end(record, token, sink, "canceled", entry, run=run, board=board, request=request)
        except StoreError:
            raise  # not the run's fault: the task retries from the journal
        except TimeoutError:
            error = StepTimeout(
                f"run {record['id']}: step exceeded its time limit of {self.settings.step_time_limit:g}s",
                run_id=record["id"],
            )
            entry = entry_from_outcome(record["agent"], error=error)
            return await self._end(record, token, sink, "failed", entry, run=run, board=board, request=request)
        except Exception as exc:
            logger.info("run %s (%s) failed: %s", record["id"], agent.name, exc)
            entry = entry_from_outcome(record["agent"], error=exc, instance=agent.name,
                                       max_iterations=agent.options.max_iterations)
            return await self._end(record, token, sink, "failed", entry, run=run, board=board, request=request)

    async def _rebuild(self, record: dict[str, str], sink: StreamSink) -> tuple[Run, ChildRequest | None]:
        registry = self.ctx.registry(record["session"])
        request = ChildRequest.model_validate_json(record["request"]) if record.get("request") else None
        if record.get("state"):
            state = RunState.model_validate_json(record["state"])
            state.messages = await self.journal.messages(record["id"], int(record.get("msg_count") or 0))
            run = Run.rebuild(registry, state)
            run.agent.options.on_event = sink
            run.emit(events.RUN_RESUMED, worker=self.hostname, step=state.iteration)
            return run, request
        depth = int(record.get("depth") or 0)
        agent = registry.spawn(record["agent"], depth)
        agent.options.on_event = sink
        if request is not None:
            n = int(record.get("instance_n") or 0) or await self.journal.next_instance(record["session"], request.agent)
            agent.name = instance_name(request.agent, request.task, n)
            run = Run.start_child(agent, request, run_id=record["id"])
        else:
            raw = json.loads(record["input"]) if record.get("input") else None
            first = ([Message.model_validate(m) for m in raw] if raw
                     else [Message.text("user", Role.USER, record.get("task", ""))])
            run = Run.start(agent, first, run_id=record["id"])
        run.emit(events.RUN_STARTED, worker=self.hostname, depth=depth, parent=record.get("parent", ""),
                 task=(record.get("task") or "")[:200])
        return run, request

    async def _collect(self, record: dict[str, str], run: Run) -> None:
        """Deliver every child entry that has joined into this run's record."""
        iteration = run.state.iteration
        wanted = {child_key(r, iteration): r for r in run.missing()}
        for key, entry in (await self.journal.children(record["id"], list(wanted))).items():
            run.deliver(wanted[key].key, entry)

    async def _end(
        self,
        record: dict[str, str],
        token: str,
        sink: StreamSink,
        status: str,
        entry: DelegateEntry,
        *,
        run: Run | None = None,
        board: Any = None,
        request: ChildRequest | None = None,
        reply: str = "",
    ) -> Progress:
        if board is not None and request is not None and request.task_id:
            try:
                await board.update_status(request.task_id, board_status(entry))
            except Exception as exc:
                entry.warning = f'task board update failed for "{request.task_id}": {exc}'
        fields: dict[str, str] = {}
        if run is not None:
            fields["usage"] = run.state.usage.model_dump_json()
            fields["instance"] = run.agent.name
        if reply:
            fields["reply"] = reply
        if entry.error:
            fields["error"] = entry.error
        sink(Event(kind=events.RUN_FINISHED, agent=run.agent.name if run else record["agent"], run_id=record["id"],
                   session_id=record["session"],
                   data={"status": status, "worker": self.hostname, "entry": entry.to_json(),
                         "usage": run.state.usage.model_dump() if run else {}}))
        await finish_and_join(self.journal, self.enqueue, record, token, status, entry, events=sink.drain(), **fields)
        return Progress(status, entry.error or "")


async def finish_and_join(
    journal: Journal,
    enqueue: Enqueue,
    record: dict[str, str],
    token: str,
    status: str,
    entry: DelegateEntry,
    *,
    events: str = "",
    **fields: str,
) -> None:
    """End the run and join its entry into its parent; the call that completes the parent's join
    enqueues the parent's resume (coordinators are woken by the join's publish instead)."""
    left, mode = await journal.finish(record, token, status, entry.to_json(), events=events, **fields)
    if left == 0 and mode == "worker":
        parent = await journal.record(record["parent"])
        await enqueue(RESUME_AGENT, [record["parent"], record["root"]], task_kwargs(parent))


class _WorkerDelegator:
    """Dispatches children as Celery tasks and suspends the parent (never waits on them)."""

    def __init__(self, executor: Executor, record: dict[str, str], sink: StreamSink) -> None:
        self.executor = executor
        self.record = record
        self.sink = sink

    async def delegate(self, parent: Run, requests: list[ChildRequest]) -> list[DelegateEntry] | None:
        await dispatch_children(
            self.executor.journal, self.executor.enqueue, self.record, requests, parent.state.iteration,
            self.executor.ctx.fingerprint, parent,
        )
        return None


async def dispatch_children(
    journal: Journal,
    enqueue: Enqueue,
    record: dict[str, str],
    requests: list[ChildRequest],
    iteration: int,
    fingerprint: str,
    parent: Run,
) -> list[str]:
    """Register the children of ``record``'s run, then enqueue those not started yet."""
    ids, to_start = await journal.expect_children(record, requests, iteration, fingerprint)
    for cid, request in zip(ids, requests, strict=True):
        if cid in to_start:
            kwargs = {"agent": request.agent, "depth": request.depth, "session": record["session"],
                      "preview": request.task[:80]}
            await enqueue(RUN_AGENT, [cid, record["root"]], kwargs)
            parent.emit(events.RUN_QUEUED, child_run=cid, child_agent=request.agent, depth=request.depth,
                        task=request.task[:200])
    return ids
