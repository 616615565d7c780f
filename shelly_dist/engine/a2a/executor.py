"""An A2A task is one top-level run of a shelly agent, in the session whose id is the task's.

``execute`` starts the run through the engine's runtime (embedded, or the coordinator with its
tree on the worker pool), turns the session's events — the whole tree's, replayed from the pool —
into ``working`` status updates (on ``message/stream``, a reply's text too, as it is written: one
update per ``message_delta``, metadata ``kind: message_delta``), and ends with the reply as the
task's artifact. Cancelling the
task cancels the run: the runtime stops the whole tree (the coordinator cancels it in Redis).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
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
    template = STATUS_LINES.get(event.kind)
    return template.format_map(_Fields(event.data, agent=event.agent)) if template else None


class ShellyAgentExecutor(AgentExecutor):
    """Runs ``agent`` (a config name) of ``engine`` for each A2A task."""

    def __init__(self, engine: Engine, agent: str) -> None:
        self.engine = engine
        self.agent = agent

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
        await updater.start_work()
        session = self.engine.session(task_id, agent=self.agent, persist=False)
        feed = self.engine.bus.subscribe(buffer=1024)
        forward = asyncio.create_task(self._forward(feed, session.id, updater, context_id))
        try:
            outcome = await session.send(text)
        except asyncio.CancelledError:
            raise  # tasks/cancel: the SDK cancels this coroutine after our cancel() said so
        except Exception as exc:
            await self._stop(feed, forward)
            log.info("a2a: task %s failed: %s", task_id, exc)
            await updater.failed(self._message(f"{type(exc).__name__}: {exc}", task_id, context_id))
            return
        finally:
            if not forward.done():
                await self._stop(feed, forward)
        await updater.add_artifact([new_text_part(outcome.reply.text_content())], name=ARTIFACT_NAME,
                                   metadata={"run_id": outcome.run_id, "session": session.id})
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """The SDK cancels :meth:`execute` right after this; the run's cancellation stops its tree."""
        await TaskUpdater(event_queue, str(context.task_id), str(context.context_id)).cancel()

    @staticmethod
    async def _stop(feed: Subscription, forward: asyncio.Task[None]) -> None:
        """Close the feed (the forwarder sends what it holds, then ends) and wait for it."""
        feed.close()
        with contextlib.suppress(Exception):
            await forward

    async def _forward(self, feed: Subscription, session: str, updater: TaskUpdater, context_id: str) -> None:
        async for event in feed:
            if event.session_id != session:
                continue
            line = str(event.data.get("text") or "") if event.kind == events.MESSAGE_DELTA else status_text(event)
            if not line:
                continue
            await updater.update_status(
                TaskState.TASK_STATE_WORKING, self._message(line, updater.task_id, context_id),
                metadata={"kind": event.kind, "agent": event.agent, "run_id": event.run_id},
            )

    @staticmethod
    def _message(text: str, task_id: str, context_id: str) -> Message:
        return new_text_message(text, context_id=context_id, task_id=task_id, role=Role.ROLE_AGENT)
