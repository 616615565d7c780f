"""The console's in-process backend: sessions run in this process's engine (no broker configured).

What the pool reads from Redis is kept here in memory, rebuilt from the engine's events (the same
events the pool's workers write to Redis): each session's tree (``run_started``,
``run_finished``, ``message_added``), each run's chat, and the events themselves for the stream.
It is bounded — the :data:`KEEP_SESSIONS` sessions started last, :data:`KEEP_EVENTS` events each,
:data:`KEEP_MESSAGES` messages per run — and gone when the process ends. A top-level run's chat is
its agent's whole chat; a delegated run's is rebuilt from its events, so its texts are cut where
the events cut them (2,000 characters) and ``complete`` says so. Event ids are this process's
sequence numbers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shelly_dist import events
from shelly_dist.console.backend import Page
from shelly_dist.console.views import ENDED, RunView, SessionView
from shelly_dist.engine.session import user_messages
from shelly_dist.errors import UsageError
from shelly_dist.events import Event
from shelly_dist.models import Usage
from shelly_dist.runtime.spending import Spent, spent_by_run

if TYPE_CHECKING:
    from shelly_dist.engine.engine import Engine

KEEP_SESSIONS = 200
KEEP_EVENTS = 20_000
KEEP_MESSAGES = 500
BUS_BUFFER = 100_000
"""Events the bus holds for this backend before it drops (it reads them as they come)."""


@dataclass
class _Run:
    view: RunView
    messages: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=KEEP_MESSAGES))
    results: int = 0
    """Tool results matched so far to the last assistant message's calls."""


@dataclass
class _Session:
    id: str
    root: str
    runs: dict[str, _Run]
    events: deque[tuple[int, Event]] = field(default_factory=lambda: deque(maxlen=KEEP_EVENTS))
    task: asyncio.Task[None] | None = None
    conversation: Any = None
    """The engine's session: its top-level agent's chat is the root run's whole conversation."""


def _add_usage(total: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    return (Usage.model_validate(total) + Usage.model_validate(more)).model_dump()


class LocalBackend:
    """Runs sessions in ``engine`` (which the caller owns and closes)."""

    name = "in-process"

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.decisions = engine.decisions
        """The decisions waiting in this process (its runs')."""
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._root_session: dict[str, str] = {}
        self._log: deque[tuple[int, Event]] = deque(maxlen=KEEP_EVENTS)
        self._seq = 0
        self._changed = asyncio.Event()
        self._subscription = engine.bus.subscribe(BUS_BUFFER)
        self._pump = asyncio.ensure_future(self._read_bus())

    # -- starting and cancelling ------------------------------------------------------------

    async def start(self, task: str, *, agent: str | None, context: str) -> tuple[str, str]:
        name = self.engine.agent_name(agent)
        session = self.engine.session(agent=name, persist=False)
        run_id = uuid.uuid4().hex[:12]
        root = RunView(id=run_id, agent=name, root=run_id, instance=session.agent.name, status="running",
                       task=task, created=time.time())
        kept = _Session(session.id, run_id, {run_id: _Run(root)}, conversation=session)
        kept.runs[run_id].messages.append(_message("user", "user", task))
        self._keep(kept)
        kept.task = asyncio.ensure_future(self._drive(kept, session, user_messages(task, context)))
        return session.id, run_id

    def _keep(self, kept: _Session) -> None:
        self._sessions[kept.id] = kept
        self._root_session[kept.root] = kept.id
        while len(self._sessions) > KEEP_SESSIONS:
            oldest = next((s for s in self._sessions.values() if s.task is None or s.task.done()), None)
            if oldest is None:
                break
            del self._sessions[oldest.id]
            self._root_session.pop(oldest.root, None)

    async def _drive(self, kept: _Session, session: Any, messages: list[Any]) -> None:
        root = kept.runs[kept.root].view
        try:
            outcome = await session.send_messages(messages, run_id=kept.root)
            root.status, root.reply, root.usage = "done", outcome.reply.text_content(), outcome.usage.model_dump()
        except asyncio.CancelledError:
            root.status, root.error = "canceled", "canceled"
        except Exception as exc:
            root.status, root.error = "failed", str(exc) or type(exc).__name__
        finally:
            root.ended = time.time()
            self._wake()

    async def cancel(self, session: str) -> list[str] | None:
        kept = self._sessions.get(session)
        if kept is None:
            return None
        if kept.task is not None and not kept.task.done():
            kept.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({kept.task})
        return [kept.root]

    # -- what happened, from the engine's events -------------------------------------------

    async def _read_bus(self) -> None:
        async for event in self._subscription:
            self._seq += 1
            self._log.append((self._seq, event))
            kept = self._sessions.get(event.session_id)
            if kept is not None:
                kept.events.append((self._seq, event))
                self._apply(kept, event)
            self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _apply(self, kept: _Session, event: Event) -> None:
        """Fold one event into the session's tree and the run's chat."""
        data, rid = event.data, event.run_id
        if not rid:
            return
        run = kept.runs.get(rid)
        if run is None:
            run = kept.runs[rid] = _Run(RunView(id=rid, agent=event.agent, root=kept.root, instance=event.agent,
                                                status="running", created=event.timestamp))
        view = run.view
        if event.kind == events.RUN_STARTED:
            if rid == kept.root:  # the send's own run: its view and its user message are kept already
                return
            view.parent, view.depth, view.worker = str(data.get("parent", "")), int(data.get("depth", 0)), ""
            view.task, view.created = str(data.get("task", "")), event.timestamp
            run.messages.append(_message("user", "user", view.task))
        elif event.kind == events.RUN_FINISHED:
            entry = data.get("entry") or {}
            view.status, view.ended = str(data.get("status", "done")), event.timestamp
            view.usage = dict(data.get("usage") or view.usage)
            view.agent = str(entry.get("agent") or view.agent)
            view.error, view.handoff = str(entry.get("error") or ""), str(entry.get("handoff") or "")
            view.reply = str(entry.get("result") or "")
        elif event.kind == events.MESSAGE_ADDED:
            self._message_added(run, event)
        elif event.kind == events.TOOL_CALL_START and run.messages:
            calls = [p for p in run.messages[-1]["parts"] if p["kind"] == "tool_call" and not p["id"]]
            if calls:
                calls[0].update(id=str(data.get("call_id", "")), arguments=str(data.get("arguments", "")))

    def _message_added(self, run: _Run, event: Event) -> None:
        data = event.data
        if data.get("role") == "assistant":
            if data.get("usage") and run.view.status not in ENDED:
                run.view.usage = _add_usage(dict(run.view.usage), data["usage"])
            message = _message(event.agent, "assistant", str(data.get("text", "")))
            message["parts"] += [{"kind": "tool_call", "id": "", "name": str(name), "arguments": ""}
                                 for name in data.get("tool_calls") or []]
            run.messages.append(message)
            run.results = 0
        elif data.get("role") == "tool":
            calls = [p for m in list(run.messages)[-1:] for p in m["parts"] if p["kind"] == "tool_call"]
            call_id = calls[run.results]["id"] if run.results < len(calls) else ""
            run.results += 1
            run.messages.append({"sender": event.agent, "role": "tool", "parts": [
                {"kind": "tool_result", "tool_call_id": call_id, "content": str(data.get("text", ""))}]})

    # -- reading -------------------------------------------------------------------------------

    def _view(self, kept: _Session) -> SessionView:
        root = kept.runs[kept.root].view
        totals = spent_by_run((r.view.id, r.view.parent, r.view.usage) for r in kept.runs.values())
        return SessionView(id=kept.id, roots=[root], spent=totals[kept.root][1] if kept.root in totals else Spent())

    async def sessions(self, *, limit: int, cursor: str | None) -> Page:
        newest = list(reversed(self._sessions.values()))
        start = 0
        if cursor:
            if not cursor.isdigit():
                raise UsageError(f"serve: cursor {cursor!r} is not a cursor of this server")
            start = int(cursor)
        page = newest[start:start + limit]
        return Page([self._view(s) for s in page], str(start + limit) if start + limit < len(newest) else None)

    async def session(self, session: str) -> SessionView | None:
        kept = self._sessions.get(session)
        return self._view(kept) if kept is not None else None

    async def runs(self, session: str) -> list[RunView] | None:
        kept = self._sessions.get(session)
        if kept is None:
            return None
        return sorted((r.view for r in kept.runs.values()), key=lambda v: (v.depth, v.created))

    async def chat(self, run_id: str) -> tuple[RunView, list[dict[str, Any]], bool] | None:
        """A top-level run's whole chat (its agent's); a delegated run's rebuilt from its events."""
        kept = self._sessions.get(self._root_session.get(run_id.split("-", 1)[0], ""))
        run = kept.runs.get(run_id) if kept is not None else None
        if kept is None or run is None:
            return None
        if run_id == kept.root:
            return run.view, [m.model_dump(mode="json") for m in kept.conversation.agent.chat.messages()], True
        return run.view, list(run.messages), False

    def events(self, session: str | None, after: str | None) -> AsyncIterator[tuple[str, Event]]:
        if after is not None and not after.isdigit():
            raise UsageError(f"serve: Last-Event-ID: {after!r} is not an event id of this server")
        return self._follow(session, int(after) if after else (0 if session is not None else self._seq))

    async def _follow(self, session: str | None, seen: int) -> AsyncIterator[tuple[str, Event]]:
        while True:
            changed = self._changed
            kept = self._sessions.get(session) if session is not None else None
            log = self._log if session is None else (kept.events if kept is not None else deque())
            fresh: list[tuple[int, Event]] = []
            for item in reversed(log):  # the newest first, back to the last one seen
                if item[0] <= seen:
                    break
                fresh.append(item)
            for seq, event in reversed(fresh):
                seen = seq
                yield str(seq), event
            await changed.wait()

    async def health(self) -> dict[str, Any]:
        return {"ok": True, "backend": self.name, "sessions": len(self._sessions)}

    async def aclose(self) -> None:
        running = [s.task for s in self._sessions.values() if s.task is not None and not s.task.done()]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        self._subscription.close()
        self._pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._pump


def _message(sender: str, role: str, text: str) -> dict[str, Any]:
    return {"sender": sender, "role": role, "parts": [{"kind": "text", "text": text}] if text else []}
