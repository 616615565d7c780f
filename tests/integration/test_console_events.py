"""The pool's event streams as the console serves them, against the real Redis (no workers):
a session's stream resumes exactly after an event, even in the middle of a step's batch, and the
feed of every session follows sessions that start after it and resumes by its ids."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from shelly_dist.console.pool_feed import every_session, stream_after, stream_position
from shelly_dist.events import Event
from shelly_dist.redisio.connection import connect
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.journal.stream import StreamSink


@pytest.fixture
async def redis(redis_url: str, key_prefix: str) -> AsyncIterator[tuple[Any, Keys]]:
    client = connect(redis_url, client_name="test-console-events")
    try:
        yield client, Keys(key_prefix)
    finally:
        await client.aclose()


async def write(client: Any, keys: Keys, session: str, *kinds: str) -> None:
    """One stream entry holding ``kinds`` as one batch (as a step's checkpoint writes them)."""
    sink = StreamSink(client, keys, session, retention=600)
    for kind in kinds:
        sink(Event(kind=kind, agent="a", run_id="r"))
    await sink.flush()


async def take(events: AsyncIterator[tuple[str, Event]], n: int, until: str = "") -> list[tuple[str, str]]:
    """``(id, kind)`` of the first ``n`` events (with ``until``: up to the event of that kind)."""
    out: list[tuple[str, str]] = []

    async def read() -> None:
        async for event_id, event in events:
            out.append((event_id, event.kind))
            if (event.kind == until) if until else len(out) == n:
                return

    await asyncio.wait_for(read(), 30)
    return out


async def test_a_session_stream_resumes_exactly_after_an_event_inside_a_batch(redis) -> None:
    client, keys = redis
    await write(client, keys, "s1", "a", "b", "c")
    await write(client, keys, "s1", "d", "e")
    everything = await take(stream_after(client, keys, "s1", *stream_position(None)), 5)
    assert [k for _, k in everything] == ["a", "b", "c", "d", "e"]
    assert everything[1][0].endswith(":1") and everything[3][0].endswith(":0")
    resumed = await take(stream_after(client, keys, "s1", *stream_position(everything[1][0])), 3)
    assert resumed == everything[2:]


async def test_the_feed_of_every_session_resumes_after_an_id_and_follows_sessions_that_start_later(redis) -> None:
    client, keys = redis
    await client.zadd(keys.run_sessions(), {"old": time.time() - 60})
    await write(client, keys, "old", "seen")
    (seen_entry, _), = await client.xrevrange(keys.events("old"), count=1)
    feed = every_session(client, keys, f"{seen_entry}:0@old")
    await write(client, keys, "old", "old-1")
    await client.zadd(keys.run_sessions(), {"new": time.time()})
    await write(client, keys, "new", "new-1", "new-2")
    got = await take(feed, 3)
    # "seen" not again; each session's in its order (two streams' entries of one millisecond
    # have no order between them)
    assert sorted(k for _, k in got) == ["new-1", "new-2", "old-1"]
    assert [k for i, k in got if i.endswith("@new")] == ["new-1", "new-2"]
    assert [k for i, k in got if i.endswith("@old")] == ["old-1"]
    new_1 = next(i for i, k in got if k == "new-1")
    resumed = await take(every_session(client, keys, new_1), 1, until="new-2")
    # "new-1" never again; "old-1" may come again if it was written in new-1's millisecond
    assert [k for _, k in resumed if k != "old-1"] == ["new-2"]


async def test_the_feed_of_every_session_starts_from_now_without_an_id(redis) -> None:
    client, keys = redis
    await client.zadd(keys.run_sessions(), {"s": time.time()})
    await write(client, keys, "s", "before")
    got = asyncio.ensure_future(take(every_session(client, keys, None), 1))
    while not got.done():  # the feed starts when first read: write until it has seen one
        await write(client, keys, "s", "now")
        await asyncio.wait({got}, timeout=0.2)
    assert (await got)[0][1] == "now"
