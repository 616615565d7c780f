"""Blocking reads end when cancelled, even when the library under them swallows the
cancellation, and wait out Redis outages of any length (DESIGN §3 rule 11)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from shelly_dist.errors import StoreError
from shelly_dist.redisio import blocking
from shelly_dist.redisio.blocking import is_outage, read_through


@pytest.fixture(autouse=True)
def _short_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blocking, "BACKOFF_BASE", 0.001)
    monkeypatch.setattr(blocking, "BACKOFF_CAP", 0.01)
    monkeypatch.setattr(blocking._Outage, "since", None)


async def test_a_follow_loop_ends_when_its_read_swallows_the_cancellation() -> None:
    reading = asyncio.Event()

    async def swallowing_read() -> str:
        """Reads like Python 3.11's ``wait_for`` when the cancel meets the result: it returns."""
        reading.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            return "entry"
        return "entry"

    async def follow() -> None:
        while True:
            await read_through("test", swallowing_read)

    task = asyncio.create_task(follow())
    await asyncio.wait_for(reading.wait(), 10)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=10)
    assert done, "the follower went on reading after its cancellation was swallowed"
    assert task.cancelled()


async def test_a_cancellation_swallowed_before_the_read_still_ends_the_next_read() -> None:
    async def swallow_own_cancel() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            pass  # a library caught it and carried on; cancelling() still counts it
        await read_through("test", lambda: asyncio.sleep(3600))

    task = asyncio.create_task(swallow_own_cancel())
    done, _ = await asyncio.wait({task}, timeout=10)
    assert done and task.cancelled()


async def test_an_outage_is_waited_out_and_the_read_answers_after_it(caplog: pytest.LogCaptureFixture) -> None:
    failures = 5
    calls = 0

    async def read() -> str:
        nonlocal calls
        calls += 1
        if calls <= failures:
            raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6391. Connection refused.")
        return "answer"

    with caplog.at_level(logging.WARNING, logger=blocking.__name__):
        assert await read_through("events", read) == "answer"
    assert calls == failures + 1
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "events: Redis is not answering" in lines[0] and "Connection refused" in lines[0]
    assert "answers again" in lines[1]


async def test_a_store_error_caused_by_a_lost_connection_counts_as_an_outage() -> None:
    calls = 0

    async def read() -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            try:
                raise RedisConnectionError("Connection reset by peer")
            except RedisConnectionError as exc:
                raise StoreError("journal: redis error: ConnectionError: reset") from exc
        return calls

    assert await read_through("journal", read) == 2


async def test_a_bad_command_is_raised_at_once() -> None:
    calls = 0

    async def read() -> None:
        nonlocal calls
        calls += 1
        raise ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")

    with pytest.raises(ResponseError):
        await read_through("events", read)
    assert calls == 1 and not is_outage(ResponseError("x"))


async def test_an_outage_outlasting_the_deadline_reraises_its_error() -> None:
    async def read() -> None:
        raise RedisConnectionError("Connection refused")

    with pytest.raises(RedisConnectionError):
        await read_through("watch", read, until=time.monotonic() + 0.05)


async def test_each_outage_error_runs_the_cleanup_before_the_retry() -> None:
    events: list[str] = []

    async def read() -> str:
        events.append("read")
        if events.count("read") < 3:
            raise RedisConnectionError("gone")
        return "ok"

    async def drop() -> None:
        events.append("drop")

    assert await read_through("watch", read, on_outage=drop) == "ok"
    assert events == ["read", "drop", "read", "drop", "read"]
