"""A run's events on their way to the session's stream: buffered, then written in batches.

A run's events are buffered in memory by a non-blocking sink (the agent loop calls sinks inline)
and written with one ``XADD`` per checkpoint — a stream entry holds a batch — so a delegation
costs a couple of commands, not one per event; a journal script takes the batch (:meth:`StreamSink.drain`)
and writes it in the same round trip as the state it belongs to. A streamed reply's text
(``message_delta``, only when a person watches) cannot wait for the checkpoint after the reply:
consecutive deltas of a run are merged into one event in the buffer, and written within
:data:`DELTA_INTERVAL`, so a watcher on another machine sees the text grow about ten times a
second for one ``XADD`` each. Reading the stream is the client's
(:mod:`shelly_dist.runtime.celery.client.events`).

What a run's step causes in its team's workspace (a channel post, a wake it starts, its inbox
acknowledged) is buffered with the run's own events while the run is stepped (:func:`routed_to`),
so the stream holds them in the order they happened — the tool call, then its post — as the
embedded bus does, instead of the post first and the run's events at its next checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import redis.asyncio as aioredis

from shelly_dist.events import MESSAGE_DELTA, Event, add_merging
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import Keys
from shelly_dist.redisio.refusal import write_through

DELTA_INTERVAL = 0.1
"""Seconds a streamed reply's text waits in the buffer at most before it is written."""

STREAM_MAXLEN = 20_000
"""Approximate cap on a session stream's entries (each a batch): bounded state (DESIGN §3 r10)."""


class StreamSink:
    """Buffers events for one session; ``flush`` writes them as one stream entry."""

    def __init__(self, client: aioredis.Redis, keys: Keys, session: str, *, retention: int) -> None:
        self._client = client
        self._key = keys.events(session)
        self._session = session
        self._retention = retention
        self._buffer: list[Event] = []
        self._timer: asyncio.TimerHandle | None = None
        self._inflight: asyncio.Future[None] | None = None
        self.routing = False
        """Other events of its session are buffered here (:func:`routed_to`) while this is set."""

    @property
    def session(self) -> str:
        return self._session

    def __call__(self, event: Event) -> None:
        if not event.session_id:
            event = event.model_copy(update={"session_id": self._session})
        add_merging(self._buffer, event)
        if event.kind == MESSAGE_DELTA and self._timer is None:
            self.flush_soon(DELTA_INTERVAL)

    def drain(self) -> str:
        """Take the buffered events as one batch payload ("" when none), for a journal script to
        write in the same round trip as the state it belongs to."""
        if not self._buffer:
            return ""
        batch, self._buffer = self._buffer, []
        return json.dumps([e.model_dump(mode="json") for e in batch])

    def flush_soon(self, delay: float) -> None:
        """Write the buffered events after ``delay`` seconds unless a journal write takes them
        first: a quick step's events ride with its checkpoint (no write of their own), a slow one's
        show within ``delay``. Call :meth:`settle` before draining for a journal write, so a timed
        write already under way lands first and the stream keeps the events in order."""
        self._timer = asyncio.get_running_loop().call_later(delay, self._flush_now)

    def _flush_now(self) -> None:
        self._timer = None
        self._inflight = asyncio.ensure_future(self._write_after(self._inflight, self.drain()))

    async def _write_after(self, previous: asyncio.Future[None] | None, payload: str) -> None:
        """Write ``payload`` once the timed write before it has landed: the stream keeps the order."""
        if previous is not None:
            await previous
        await self._write(payload, expire=False)

    async def settle(self) -> None:
        """Cancel a pending :meth:`flush_soon`, and wait for its write if it has started."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        inflight, self._inflight = self._inflight, None
        if inflight is not None:
            await inflight

    async def flush(self, *, expire: bool = True) -> None:
        """Write the buffered events now. ``expire=False`` skips refreshing the stream's TTL when a
        journal script (which refreshes it) is about to follow; a stream this write creates still
        gets one at once (``EXPIRE NX``), so a crash before that script leaves no key forever."""
        await self.settle()
        await self._write(self.drain(), expire=expire)

    async def flush_reading(self, key: str, field: str) -> str | None:
        """:meth:`flush`, and the hash field ``key``/``field`` read in the same round trip when
        there was something to write (the coordinator's root learns its cancel flag from its own
        checkpoints, issue 16): ``""`` for a field that is not set, ``None`` when nothing was
        written, so nothing was read."""
        read = await self.flush_reading_fields(key, [field])
        return None if read is None else read[0]

    async def flush_reading_fields(self, key: str, fields: list[str]) -> list[str] | None:
        """:meth:`flush_reading` of several fields of one hash (the root's cancel flag and its
        steering count), in the same round trip: their values, ``""`` for each one not set."""
        await self.settle()
        payload = self.drain()
        return await self._write(payload, expire=True, read=(key, fields)) if payload else None

    async def _write(self, payload: str, *, expire: bool,
                     read: tuple[str, list[str]] | None = None) -> list[str] | None:
        if not payload:
            return None
        async def write() -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.xadd(self._key, {"events": payload}, maxlen=STREAM_MAXLEN, approximate=True)
                pipe.expire(self._key, self._retention, nx=not expire)
                if read is not None:
                    pipe.hmget(read[0], read[1])
                return await pipe.execute()  # type: ignore[no-any-return]

        with redis_errors("events"):
            answers = await write_through(write)  # Redis full: wait, the events are kept meanwhile
        return [v or "" for v in answers[-1]] if read is not None else None


_routed: ContextVar[StreamSink | None] = ContextVar("shelly_routed_stream", default=None)


@contextlib.contextmanager
def routed_to(sink: StreamSink) -> Iterator[None]:
    """While stepping a run: other events of its session raised in this context (its workspace's,
    :func:`routed`) join ``sink``'s buffer, in order with the run's own. On exit they no longer
    do (a task the step started may outlive it), before the caller's last flush."""
    token = _routed.set(sink)
    sink.routing = True
    try:
        yield
    finally:
        sink.routing = False
        _routed.reset(token)


def routed(session: str) -> StreamSink | None:
    """The sink of the run being stepped in this context when it takes ``session``'s events."""
    sink = _routed.get()
    return sink if sink is not None and sink.routing and sink.session == session else None
