"""Reading the events of a session: its Redis stream, written in batches, read by anyone.

Writers (:class:`~shelly_dist.runtime.celery.journal.stream.StreamSink`) put a batch of a run's
events in one stream entry, so a delegation costs a couple of commands, not one per event.
Readers (the coordinator's live view, ``shelly events --follow``) expand the batches back into
single events, in order; a follower ends when cancelled and outlasts Redis outages
(:mod:`shelly_dist.redisio.blocking`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import redis.asyncio as aioredis

from shelly_dist.events import Event
from shelly_dist.redisio.blocking import cancellable, read_through
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import Keys


async def read_entries(
    client: aioredis.Redis,
    keys: Keys,
    session: str,
    *,
    after: str = "0-0",
    follow: bool = False,
    block_ms: int = 1000,
    batch_interval: float = 0.0,
) -> AsyncIterator[tuple[str, list[Event]]]:
    """Yield ``(stream id, its batch of events)`` from ``after`` on; with ``follow``, wait for new
    ones until cancelled.

    A follower goes through :func:`~shelly_dist.redisio.blocking.read_through`: cancelling it ends it
    (even when redis-py swallows the cancellation), and a Redis outage of any length is waited out,
    after which it reads on from the last entry it yielded, so nothing written meanwhile is missed.
    Without ``follow`` a failed read raises ``StoreError``. ``batch_interval`` (seconds) paces a
    follower: after a read that returned entries it waits that long before reading again, so a
    burst of writers costs one read, not one per entry.
    """
    key = keys.events(session)
    last = after
    while True:
        def xread(start: str = last) -> Awaitable[Any]:
            return client.xread({key: start}, count=500, block=block_ms if follow else None)

        with redis_errors("events"):
            answer = await (read_through("events", xread) if follow else cancellable(xread()))
        if not answer:
            if not follow:
                return
            continue
        if follow and batch_interval:
            await asyncio.sleep(batch_interval)
        for _stream, entries in answer:
            for entry_id, fields in entries:
                last = entry_id
                yield entry_id, [Event.model_validate(raw) for raw in json.loads(fields.get("events", "[]"))]


async def read_events(
    client: aioredis.Redis,
    keys: Keys,
    session: str,
    *,
    after: str = "0-0",
    follow: bool = False,
    block_ms: int = 1000,
    batch_interval: float = 0.0,
) -> AsyncIterator[tuple[str, Event]]:
    """Yield ``(stream id, event)`` one event at a time, as :func:`read_entries` reads them."""
    async for entry_id, batch in read_entries(client, keys, session, after=after, follow=follow,
                                              block_ms=block_ms, batch_interval=batch_interval):
        for event in batch:
            yield entry_id, event


async def last_id(client: aioredis.Redis, keys: Keys, session: str) -> str | None:
    """The id of the newest entry of the session's stream (``None`` when it has none): a reader
    that has reached it has seen everything written before this call."""
    with redis_errors("events"):
        newest = await client.xrevrange(keys.events(session), count=1)
    return str(newest[0][0]) if newest else None


def not_before(entry_id: str, other: str) -> bool:
    """Whether stream id ``entry_id`` is at or after ``other`` (ids compare as (ms, seq))."""
    return _parse(entry_id) >= _parse(other)


def _parse(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)
