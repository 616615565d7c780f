"""The in-process event bus: fan-out of :class:`~shelly_dist.events.Event` to subscribers.

As in Shelly, **publishing never blocks**: each subscriber has a bounded buffer, and when it is
full the event is dropped for that subscriber only (and counted in ``dropped``), so one slow
renderer can never stall an agent loop. Events may be published from any thread (a Celery
consumer, a tool running in ``to_thread``): off the subscriber's loop, delivery is handed over
with ``call_soon_threadsafe``. A bus instance is itself an ``EventSink``: ``agent(sink=bus)``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

from shelly_dist.errors import UsageError
from shelly_dist.events import Event

_CLOSED = object()


class Subscription:
    """One subscriber's buffered stream of events; iterate it with ``async for``.

    Iteration ends after :meth:`close` (or ``EventBus.unsubscribe``), once the buffered events
    have been read. ``dropped`` counts events lost because the buffer was full.
    """

    def __init__(self, bus: EventBus, buffer: int, loop: asyncio.AbstractEventLoop) -> None:
        self._bus = bus
        self._loop = loop
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._buffer = buffer
        self._pending = 0  # events accepted and not yet read; guarded by _lock
        self._lock = threading.Lock()
        self._closed = False
        self.dropped = 0

    @property
    def closed(self) -> bool:
        return self._closed

    def _offer(self, event: Event) -> None:
        """Accept ``event`` if the buffer has room, from any thread; never blocks."""
        with self._lock:
            if self._closed:
                return
            if self._pending >= self._buffer:
                self.dropped += 1
                return
            self._pending += 1
        self._put(event)

    def _put(self, item: object) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._queue.put_nowait(item)
        else:
            try:
                self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
            except RuntimeError:  # the subscriber's loop is closed: nobody will read it
                pass

    def close(self) -> None:
        """Stop receiving; iteration ends after the buffered events. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._bus._remove(self)
        self._put(_CLOSED)

    def empty(self) -> bool:
        """Whether nothing is buffered right now (the next :meth:`get` would wait)."""
        return self._queue.empty()

    async def get(self) -> Event | None:
        """The next event, or ``None`` once closed and drained."""
        item = await self._queue.get()
        if item is _CLOSED:
            self._queue.put_nowait(_CLOSED)  # later calls see the end too
            return None
        with self._lock:
            self._pending -= 1
        assert isinstance(item, Event)
        return item

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Event]:
        while (event := await self.get()) is not None:
            yield event


class EventBus:
    """Fan-out of events to subscriptions. Safe to publish from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subs: list[Subscription] = []

    def subscribe(self, buffer: int = 256) -> Subscription:
        """A new subscription holding up to ``buffer`` unread events; call from an event loop."""
        if buffer < 1:
            raise UsageError("eventbus: buffer must be at least 1")
        sub = Subscription(self, buffer, asyncio.get_running_loop())
        with self._lock:
            self._subs.append(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Close ``sub``. Idempotent."""
        sub.close()

    def _remove(self, sub: Subscription) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)

    def publish(self, event: Event) -> None:
        """Deliver ``event`` to every subscriber with room; never blocks, never raises."""
        with self._lock:
            subs = list(self._subs)
        for sub in subs:
            sub._offer(event)

    __call__ = publish
    """So a bus can be passed wherever an ``EventSink`` is expected."""

    def __len__(self) -> int:
        """The number of open subscriptions."""
        with self._lock:
            return len(self._subs)
