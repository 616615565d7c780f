"""Shelly's batch collector in one process: concurrent model calls of a provider gathered into one
vendor batch, at the vendor's batch price.

A call joins the provider key's desk (:class:`~.desk.MemoryDesk`) and waits in its task; a driver
task of the collector looks at the desk whenever something is due there and does what is due —
:class:`~.work.BatchWork`, the same look a pool's elected holder takes at a desk in Redis — so
``collect_window``, ``max_batch_size``, ``poll_interval``, ``timeout``, the fallbacks and the
events behave the same embedded and on a pool (see :mod:`.work`).

A caller cancelled while waiting leaves the window, or, once submitted, has its result dropped;
when every call of a submitted batch is gone, the vendor batch is cancelled.

On a worker pool a call must not wait in its slot for hours: there the step machine suspends the
run instead (``shelly_dist.runtime.celery.children.batch_layer``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid

from shelly_dist import events
from shelly_dist.chats import Chat, Message
from shelly_dist.events import EventSink, discard
from shelly_dist.identity import agent_name, run_id, session_id
from shelly_dist.models.batching.api import PROVIDER_BATCH, BatchAPI, BatchSettings
from shelly_dist.models.batching.desk import MemoryDesk, ProviderDesk, Request, Waiters
from shelly_dist.models.batching.work import BatchWork
from shelly_dist.models.completer import Completer, ToolSpec
from shelly_dist.models.suspend import raise_if_failed
from shelly_dist.models.usage import UsageTracker

logger = logging.getLogger(__name__)


def new_custom_id() -> str:
    """A ``custom_id`` every vendor accepts (Anthropic: ``^[a-zA-Z0-9_-]{1,64}$``)."""
    return f"req_{uuid.uuid4().hex}"


class BatchCollector:
    """A completer that sends its calls through ``api``'s batches, ``direct`` when it cannot.

    Shared by every agent of the provider (one per engine), like Shelly's; used from one event
    loop. ``direct`` is the provider's normal stack (retries, rate limits, key rotation).
    """

    def __init__(self, direct: Completer, api: BatchAPI, settings: BatchSettings, *,
                 on_event: EventSink = discard) -> None:
        self.direct = direct
        self.api = api
        self.settings = settings
        self.desk = MemoryDesk()
        self.waiters = Waiters(self.desk, on_event)
        self.work = BatchWork(ProviderDesk(api.provider, api, settings, direct, lambda r: r, ""), self.desk,
                              self.waiters)
        self._driver: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    @property
    def usage(self) -> UsageTracker | None:
        """The provider's usage total (fallback chains compare it by identity)."""
        return getattr(self.direct, "usage", None)

    async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
        cid = new_custom_id()
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self.waiters.futures[cid] = future
        who = Request(run=run_id(), session=session_id(), agent=agent_name())
        waiting = self.desk.join(cid, who, (list(chat.view()), list(tools)))
        # What the step machine says of a call it suspends on a pool: here the call waits in its task.
        self.waiters.on_event(who.event(events.MODEL_WAITING, {"wait": PROVIDER_BATCH,
                                                                 "reason": f"{self.api.vendor} batch", "due_at": None}))
        self._nudge(full=waiting >= self.settings.max_batch_size)
        try:
            reply = await asyncio.shield(future)
        except asyncio.CancelledError:
            self.waiters.futures.pop(cid, None)
            self.desk.drop(cid)
            self._nudge()
            raise
        raise_if_failed(reply)
        return reply

    def _nudge(self, *, full: bool = False) -> None:
        """Make sure the driver runs (and looks at once when the window is full)."""
        if self._driver is None or self._driver.done():
            self._driver = asyncio.get_running_loop().create_task(self._drive(), name=f"batch {self.api.provider}")
        if full:
            self._wake.set()

    async def _drive(self) -> None:
        """Look at the desk whenever something is due there, until nothing is pending."""
        while True:
            self._wake.clear()
            due = await self.work.next_due()
            if due is None:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, due - time.time())):
                    await self._wake.wait()
            try:
                await self.work.run()
            except Exception:  # never leave a caller waiting forever: a bug here is named, then retried
                logger.exception("provider %s: the batch collector failed; looking again", self.api.provider)
                await asyncio.sleep(self.settings.poll_interval)

    async def aclose(self) -> None:
        """Stop the driver (callers still waiting are cancelled with their own tasks)."""
        if self._driver is not None:
            self._driver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._driver
