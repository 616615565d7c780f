"""A streamed reply's text crosses processes merged and soon (``StreamSink``, issue 37): the
deltas of a run become one event per write, written within ``DELTA_INTERVAL`` without waiting
for the run's next checkpoint."""

from __future__ import annotations

import asyncio
import json

import fakeredis

from shelly_dist.events import MESSAGE_DELTA, Event
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.journal.stream import DELTA_INTERVAL, StreamSink


async def entries(client: fakeredis.FakeAsyncRedis) -> list[list[dict[str, object]]]:
    return [json.loads(fields["events"]) for _, fields in await client.xrange(Keys("t:").events("sess"))]


async def test_deltas_of_a_run_are_merged_and_written_without_a_checkpoint() -> None:
    client = fakeredis.FakeAsyncRedis(decode_responses=True)
    sink = StreamSink(client, Keys("t:"), "sess", retention=60)
    shown = Event(kind=MESSAGE_DELTA, agent="w", run_id="r1", data={"text": "", "begin": True})
    sink(shown)
    for piece in ("Blue ", "light ", "scatters."):
        sink(Event(kind=MESSAGE_DELTA, agent="w", run_id="r1", data={"text": piece}))
    sink(Event(kind=MESSAGE_DELTA, agent="x", run_id="r2", data={"text": "other"}))
    deadline = asyncio.get_running_loop().time() + 10
    while not await entries(client):  # no flush, no checkpoint: the timer writes them
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(DELTA_INTERVAL / 2)
    [batch] = await entries(client)
    assert [(e["run_id"], e["data"]) for e in batch] == [
        ("r1", {"text": "Blue light scatters.", "begin": True}), ("r2", {"text": "other"})]
    assert shown.data == {"text": "", "begin": True}  # the event other sinks hold is left as it was


async def test_a_restarted_stream_is_not_merged_into_the_text_before_it() -> None:
    client = fakeredis.FakeAsyncRedis(decode_responses=True)
    sink = StreamSink(client, Keys("t:"), "sess", retention=60)
    sink(Event(kind=MESSAGE_DELTA, agent="w", run_id="r1", data={"text": "Blu"}))
    sink(Event(kind=MESSAGE_DELTA, agent="w", run_id="r1", data={"text": "", "begin": True}))
    sink(Event(kind=MESSAGE_DELTA, agent="w", run_id="r1", data={"text": "Blue"}))
    await sink.flush()
    [batch] = await entries(client)
    assert [e["data"] for e in batch] == [{"text": "Blu"}, {"text": "Blue", "begin": True}]
