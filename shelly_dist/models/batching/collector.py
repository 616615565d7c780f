"""Shelly's batch collector, in one process: concurrent model calls of a provider gathered into one
vendor batch, at the vendor's batch price.

A call joins the open window; the window is submitted after ``collect_window`` (from its first
call) or as soon as it holds ``max_batch_size`` calls; the batch is polled every ``poll_interval``
until it ends or ``timeout`` passes. Each waiting call then gets its reply from the batch's results.
A call whose batch could not be submitted, could not be polled (three failed polls in a row — one
transient failure is polled again, unlike Shelly, because every request would otherwise be paid
twice), timed out, or ended without a usable line for it (``errored``, ``expired``, ``canceled``,
missing) is made directly instead, through the provider's normal stack (retries, rate limits),
by the caller's own task — each with a ``batch_fallback`` event naming the reason. A batch that is
abandoned after it was created (timeout, polling failures) is cancelled with the vendor first, so
its requests are not paid twice.

The events are Shelly's four (``batch_submitted``, ``batch_polling``, ``batch_completed``,
``batch_fallback``), stamped with each waiting call's agent and run, so a run's live row can say
which provider batch it waits for; Shelly declares them and never emits them.

A caller cancelled while waiting leaves the window, or, once submitted, has its result dropped;
when every call of a submitted batch is gone, the vendor batch is cancelled.

On a worker pool a call must not wait in its slot for hours: there the step machine suspends the
run instead, and the pool's collector (``shelly_dist.runtime.celery`` ``batches``) does this
module's work across processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from shelly_dist import events
from shelly_dist.chats import Chat, Message
from shelly_dist.errors import ModelError
from shelly_dist.events import Event, EventSink, discard
from shelly_dist.identity import agent_name, run_id, session_id
from shelly_dist.models.batching.api import (
    BATCH_KEY,
    MISSING,
    SUCCEEDED,
    BatchAPI,
    BatchSettings,
    Outcome,
    Poll,
)
from shelly_dist.models.completer import Completer, ToolSpec
from shelly_dist.models.usage import UsageTracker

logger = logging.getLogger(__name__)

POLL_TRIES = 3
"""Failed polls in a row after which a batch is given up (cancelled) and its calls made directly."""

SUBMIT_ERROR = "submit_error"
POLL_ERROR = "poll_error"
TIMEOUT = "timeout"
"""``batch_fallback`` reasons for a whole batch (Shelly's, plus ``timeout``); a single request's
reason is its outcome state (``errored``, ``expired``, ``canceled``, ``missing``) or the batch's
status when it ended without results (``failed``…)."""


def new_custom_id() -> str:
    """A ``custom_id`` every vendor accepts (Anthropic: ``^[a-zA-Z0-9_-]{1,64}$``)."""
    return f"req_{uuid.uuid4().hex}"


def batch_reply(outcome: Outcome, vendor: str, batch_id: str, custom_id: str) -> Message:
    """The reply of a succeeded request, its usage attached and marked as a batch's (:data:`BATCH_KEY`)."""
    assert outcome.reply is not None
    reply = outcome.usage.attach(outcome.reply)
    reply.metadata[BATCH_KEY] = {"vendor": vendor, "batch_id": batch_id, "custom_id": custom_id}
    return reply


@dataclass
class _Fallback:
    """What a waiting call is told when it must make the call directly."""

    reason: str


@dataclass
class _Call:
    custom_id: str
    messages: list[Message]
    tools: list[ToolSpec]
    future: asyncio.Future[Message | _Fallback]
    who: tuple[str, str, str] = field(default_factory=lambda: (agent_name(), run_id(), session_id()))
    """(agent, run, session) of the caller, for its events."""


class BatchCollector:
    """A completer that sends its calls through ``api``'s batches, ``direct`` when it cannot.

    Shared by every agent of the provider (one per engine), like Shelly's; used from one event
    loop. ``direct`` is the provider's normal stack (retries, rate limits, key rotation).
    """

    def __init__(
        self,
        direct: Completer,
        api: BatchAPI,
        settings: BatchSettings,
        *,
        on_event: EventSink = discard,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.direct = direct
        self.api = api
        self.settings = settings
        self._on_event = on_event
        self._sleep = sleep
        self._clock = clock
        self._window: list[_Call] = []
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def usage(self) -> UsageTracker | None:
        """The provider's usage total (fallback chains compare it by identity)."""
        return getattr(self.direct, "usage", None)

    async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
        loop = asyncio.get_running_loop()
        call = _Call(new_custom_id(), list(chat.view()), list(tools), loop.create_future())
        self._window.append(call)
        if len(self._window) >= self.settings.max_batch_size:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(self.settings.collect_window, self._flush)
        try:
            outcome = await asyncio.shield(call.future)
        except asyncio.CancelledError:
            self._leave(call)
            raise
        if isinstance(outcome, _Fallback):
            return await self.direct.complete(chat, tools)
        return outcome

    def _leave(self, call: _Call) -> None:
        """A cancelled caller: out of the window, or its result dropped when it comes."""
        if call in self._window:
            self._window.remove(call)
        if not call.future.done():
            call.future.cancel()

    def _flush(self) -> None:
        """Submit the window as one batch, in a task of its own."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        calls, self._window = self._window, []
        if not calls:
            return
        task = asyncio.get_running_loop().create_task(self._run(calls), name=f"batch {self.api.provider}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, calls: list[_Call]) -> None:
        try:
            await self._submit_and_wait(calls)
        except asyncio.CancelledError:
            self._release(calls, _Fallback(TIMEOUT))
            raise
        except Exception:  # never leave a caller waiting: a bug here degrades to direct calls
            logger.exception("provider %s: batch collector failed; its calls go direct", self.api.provider)
            self._fall_back(calls, "error", "the batch collector failed")

    async def _submit_and_wait(self, calls: list[_Call]) -> None:
        api, n = self.api, len(calls)
        self._emit(calls, events.BATCH_SUBMITTED, count=n)
        try:
            lines = [api.encode(c.custom_id, c.messages, c.tools) for c in calls]
            batch_id = await api.create(lines, await api.upload(lines))
        except ModelError as exc:
            self._fall_back(calls, SUBMIT_ERROR, str(exc))
            return
        self._emit(calls, events.BATCH_POLLING, batch_id=batch_id, count=n)
        poll = await self._wait(calls, batch_id)
        if poll is None:
            return
        try:
            results = await api.results(batch_id, poll)
        except ModelError as exc:
            self._fall_back(calls, POLL_ERROR, str(exc), batch_id=batch_id)
            return
        self._emit(calls, events.BATCH_COMPLETED, batch_id=batch_id, count=len(results), status=poll.status)
        for call in calls:
            outcome = results.get(call.custom_id) or Outcome(MISSING, error=poll.error)
            if outcome.state == SUCCEEDED and outcome.reply is not None:
                if api.usage is not None:
                    api.usage.add(outcome.usage)
                self._settle(call, batch_reply(outcome, api.vendor, batch_id, call.custom_id))
            else:
                reason = outcome.state if outcome.state != MISSING or not poll.error else poll.status
                self._fall_back([call], reason, outcome.error, batch_id=batch_id)

    async def _wait(self, calls: list[_Call], batch_id: str) -> Poll | None:
        """Poll until the batch ends (its last look) or is given up (``None``: calls released)."""
        deadline = self._clock() + self.settings.timeout
        failures = 0
        while True:
            if all(c.future.done() for c in calls):  # every caller is gone: nobody wants it
                await self._cancel(batch_id)
                return None
            try:
                poll = await self.api.poll(batch_id)
                failures = 0
            except ModelError as exc:
                failures += 1
                if failures >= POLL_TRIES:
                    await self._cancel(batch_id)
                    self._fall_back(calls, POLL_ERROR, str(exc), batch_id=batch_id)
                    return None
                poll = None
            if poll is not None and poll.ended:
                return poll
            if self._clock() >= deadline:
                await self._cancel(batch_id)
                self._fall_back(calls, TIMEOUT, f"no results after {self.settings.timeout:g}s", batch_id=batch_id)
                return None
            await self._sleep(self.settings.poll_interval)

    async def _cancel(self, batch_id: str) -> None:
        """Cancel a batch nobody will read (best effort: a failure is logged, not raised)."""
        try:
            await self.api.cancel(batch_id)
        except ModelError as exc:
            logger.warning("provider %s: cancelling batch %s failed: %s", self.api.provider, batch_id, exc)

    def _settle(self, call: _Call, value: Message | _Fallback) -> None:
        if not call.future.done():
            call.future.set_result(value)

    def _release(self, calls: list[_Call], value: _Fallback) -> None:
        for call in calls:
            self._settle(call, value)

    def _fall_back(self, calls: list[_Call], reason: str, error: str, *, batch_id: str = "") -> None:
        live = [c for c in calls if not c.future.done()]
        if live:
            logger.warning("provider %s: %d call(s) go direct (%s): %s", self.api.provider, len(live), reason, error)
        data: dict[str, object] = {"reason": reason, "error": error, "count": len(calls)}
        if batch_id:
            data["batch_id"] = batch_id
        self._emit(live, events.BATCH_FALLBACK, **data)
        self._release(live, _Fallback(reason))

    def _emit(self, calls: list[_Call], kind: str, **data: object) -> None:
        """One event per waiting call, stamped with its caller."""
        base = {"provider": self.api.provider, "vendor": self.api.vendor, **data}
        for call in calls:
            agent, run, session = call.who
            self._on_event(Event(kind=kind, agent=agent, run_id=run, session_id=session,
                                 data={**base, "custom_id": call.custom_id}))

    async def aclose(self) -> None:
        """Stop every batch in flight (their callers make their calls directly)."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
