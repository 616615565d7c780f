"""An A2A task is one top-level run of a shelly agent, in the session whose id is the task's.

``execute`` starts the run through the engine's runtime (embedded, or the coordinator with its
tree on the worker pool), turns the session's events — the whole tree's, replayed from the pool —
into ``working`` status updates (on ``message/stream``, a reply's text too, as it is written: one
update per ``message_delta``, metadata ``kind: message_delta``), and ends with the reply as the
task's artifact. Cancelling the
task cancels the run: the runtime stops the whole tree (the coordinator cancels it in Redis).

People in the loop (A2A's ``input-required``): when a run of the tree asks a question
(``ask_user``) or a gated tool call waits for its approval, the task turns ``input-required``
with a message saying what is asked (its ``metadata`` names the decision), and this ``execute``
returns while the run waits (the SDK handles one request of a task at a time). The next message
of the task is the answer — a question's text, or ``yes``/``no [reason]``/``always`` for an
approval — given through ``Engine.decisions`` like any other; that ``execute`` then follows the
same run on to its next decision or its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from a2a.helpers import get_message_text, new_task, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import Message, Role, TaskState

from shelly_dist import events
from shelly_dist.events import Event

if TYPE_CHECKING:
    from shelly_dist.engine.engine import Engine
    from shelly_dist.engine.eventbus import Subscription
    from shelly_dist.runtime import RunOutcome

log = logging.getLogger(__name__)

ARTIFACT_NAME = "reply"


STATUS_LINES = {
    events.RUN_QUEUED: "{agent} delegated to {child_agent}: {task}",
    events.RUN_STARTED: "{agent} started on {worker}",
    events.RUN_RESUMED: "{agent} resumed on {worker}",
    events.RUN_FINISHED: "{agent} {status}",
    events.TOOL_CALL_START: "{agent} calls {tool}",
    events.AGENT_START: "{agent} started",
}
"""The events worth a ``working`` status update, and the line each shows."""


class _Fields(dict[str, object]):
    def __missing__(self, key: str) -> str:
        return "?"


def status_text(event: Event) -> str | None:
    """The line a status update shows for ``event`` (``None``: not worth one)."""
    if event.kind == events.RUN_STARTED and event.data.get("depth") == 0 and not event.data.get("parent"):
        return None  # the task's own top-level run: its agent_start said so already
    template = STATUS_LINES.get(event.kind)
    if event.kind in (events.RUN_STARTED, events.RUN_RESUMED) and not event.data.get("worker"):
        template = "{agent} started" if event.kind == events.RUN_STARTED else "{agent} resumed"  # in this process
    return template.format_map(_Fields(event.data, agent=event.agent)) if template else None


class ShellyAgentExecutor(AgentExecutor):
    """Runs ``agent`` (a config name) of ``engine`` for each A2A task."""

    def __init__(self, engine: Engine, agent: str) -> None:
        self.engine = engine
        self.agent = agent
        self._live: dict[str, _LiveTask] = {}
        """The runs of tasks that wait for an answer between two requests, by task id."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = str(context.task_id), str(context.context_id)
        updater = TaskUpdater(event_queue, task_id, context_id)
        if context.current_task is None:  # the SDK records a task only from the executor's first event
            history = [context.message] if context.message else []
            await event_queue.enqueue_event(new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED,
                                                     history=history))
        text = get_message_text(context.message) if context.message else ""
        if not text.strip():
            await updater.reject(self._message("a2a: the message has no text part", task_id, context_id))
            return
        live = self._live.get(task_id)
        if live is None:
            await updater.start_work()
            live = self._start(task_id, text)
        elif not await self._answer(live, text, updater, context_id):
            return  # asked again: still input-required
        else:
            await updater.start_work()
        await self._follow(live, updater, context_id)

    def _start(self, task_id: str, text: str) -> _LiveTask:
        session = self.engine.session(task_id, agent=self.agent, persist=False)
        feed = self.engine.bus.subscribe(buffer=1024)
        live = _LiveTask(session.id, feed, asyncio.ensure_future(session.send(text)))
        self._live[task_id] = live
        return live

    async def _answer(self, live: _LiveTask, text: str, updater: TaskUpdater, context_id: str) -> bool:
        """Answer the decision the task waits for with ``text``; False (and the question asked
        again) when the text does not answer it."""
        from shelly_dist.engine.decisions import who
        from shelly_dist.errors import UsageError

        pending = await self.engine.decisions.list(session=live.session)
        if not pending:
            return True  # decided elsewhere meanwhile: go on following the run
        try:
            await self.engine.decisions.answer(live.session, str(pending[0]["id"]), text, by=who("a2a"))
        except UsageError as exc:
            await self._input_required(updater, context_id, pending[0], problem=str(exc))
            return False
        return True

    async def _follow(self, live: _LiveTask, updater: TaskUpdater, context_id: str) -> None:
        """Forward the session's events as status updates until the run ends (the reply as the
        artifact) or a decision waits for an answer (``input-required``; this request ends)."""
        task_id = updater.task_id
        waits = [asyncio.ensure_future(live.feed.get()), live.run]
        try:
            while True:
                pending = await self.engine.decisions.list(session=live.session) if live.asked else []
                live.asked = False
                if pending:
                    await self._input_required(updater, context_id, pending[0])
                    return
                done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if live.run in done:
                    break
                event = waits[0].result()
                if event is None:  # the feed was closed: only the run's end is left to wait for
                    await asyncio.wait([live.run])
                    break
                waits[0] = asyncio.ensure_future(live.feed.get())
                if event.session_id != live.session:
                    continue
                if event.kind in DECISIONS:
                    live.asked = True
                elif line := (str(event.data.get("text") or "") if event.kind == events.MESSAGE_DELTA
                              else status_text(event)):
                    await updater.update_status(
                        TaskState.TASK_STATE_WORKING, self._message(line, task_id, context_id),
                        metadata={"kind": event.kind, "agent": event.agent, "run_id": event.run_id})
        finally:
            waits[0].cancel()
        self._live.pop(task_id, None)
        live.feed.close()
        try:
            outcome = live.run.result()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.info("a2a: task %s failed: %s", task_id, exc)
            await updater.failed(self._message(f"{type(exc).__name__}: {exc}", task_id, context_id))
            return
        await updater.add_artifact([new_text_part(outcome.reply.text_content())], name=ARTIFACT_NAME,
                                   metadata={"run_id": outcome.run_id, "session": live.session})
        await updater.complete()

    async def _input_required(self, updater: TaskUpdater, context_id: str, decision: dict[str, object],
                              problem: str = "") -> None:
        text = ask_text(decision) + (f" ({problem})" if problem else "")
        await updater.update_status(
            TaskState.TASK_STATE_INPUT_REQUIRED, self._message(text, updater.task_id, context_id),
            metadata={"decision": str(decision["id"]), "kind": str(decision["kind"]),
                      "session": str(decision["session"])})

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """The SDK cancels :meth:`execute` right after this; the run's cancellation stops its tree
        (a run waiting between requests for an answer is cancelled here)."""
        live = self._live.pop(str(context.task_id), None)
        if live is not None:
            live.run.cancel()
            live.feed.close()
            with contextlib.suppress(BaseException):
                await live.run
        await TaskUpdater(event_queue, str(context.task_id), str(context.context_id)).cancel()

    @staticmethod
    def _message(text: str, task_id: str, context_id: str) -> Message:
        return new_text_message(text, context_id=context_id, task_id=task_id, role=Role.ROLE_AGENT)


DECISIONS = (events.ASK_USER, events.APPROVAL_REQUESTED)
"""The events after which the task may wait for an answer (the decisions list says whether it does)."""


def ask_text(decision: dict[str, object]) -> str:
    """What an ``input-required`` message asks: a question's text and options, or which call
    waits for its approval and how to answer."""
    from shelly_dist.tools.decisions import path_text

    path = path_text([str(p) for p in decision.get("path") or []] or [str(decision.get("agent", ""))])
    if decision["kind"] == "approval":
        args = json.dumps(decision.get("arguments"), ensure_ascii=False)
        return (f"approval {decision['id']}: {path} wants to run {decision['tool']} {args}; "
                "answer yes, no <reason>, or always")
    options = decision.get("options") or []
    shown = f" [{' / '.join(str(o) for o in options)}]" if options else ""  # type: ignore[union-attr]
    return f"question {decision['id']} from {path}: {decision.get('text', '')}{shown}"


@dataclass
class _LiveTask:
    """A task's run, its session and the session's events, kept across the task's requests."""

    session: str
    feed: Subscription
    run: asyncio.Future[RunOutcome]
    asked: bool = True
    """A decision may wait: look at the session's decisions before waiting for more events."""
