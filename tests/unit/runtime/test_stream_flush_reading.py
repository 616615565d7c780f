"""The coordinator's root reads its cancel flag in the same round trip as a checkpoint's event
flush (``StreamSink.flush_reading``, issue 16)."""

from __future__ import annotations

import fakeredis

from shelly_dist.events import Event
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.journal.stream import StreamSink


def _sink(client: fakeredis.FakeAsyncRedis) -> StreamSink:
    return StreamSink(client, Keys("t:"), "sess", retention=60)


async def test_a_flush_with_events_writes_them_and_answers_the_field():
    client = fakeredis.FakeAsyncRedis(decode_responses=True)
    await client.hset("t:run:r1", "canceled", "1")
    sink = _sink(client)
    sink(Event(kind="message_added", agent="a", run_id="r1"))
    assert await sink.flush_reading("t:run:r1", "canceled") == "1"
    assert await client.xlen(Keys("t:").events("sess")) == 1


async def test_an_unset_field_reads_as_empty_and_an_empty_buffer_reads_nothing():
    client = fakeredis.FakeAsyncRedis(decode_responses=True)
    sink = _sink(client)
    assert await sink.flush_reading("t:run:r1", "canceled") is None
    sink(Event(kind="message_added", agent="a", run_id="r1"))
    assert await sink.flush_reading("t:run:r1", "canceled") == ""
