"""EventBus: fan-out, non-blocking publish with per-subscriber drops, unsubscribe, threads."""

from __future__ import annotations

import asyncio
import threading

import pytest

from shelly_dist.engine.eventbus import EventBus
from shelly_dist.errors import UsageError
from shelly_dist.events import Event


def ev(n: int) -> Event:
    return Event(kind="message_added", data={"n": n})


async def test_every_subscriber_gets_each_event() -> None:
    bus = EventBus()
    a, b = bus.subscribe(), bus.subscribe()
    bus.publish(ev(1))
    bus.publish(ev(2))
    for sub in (a, b):
        assert [(await sub.get()).data["n"] for _ in range(2)] == [1, 2]  # type: ignore[union-attr]


async def test_full_buffer_drops_for_that_subscriber_only() -> None:
    bus = EventBus()
    slow, fast = bus.subscribe(buffer=1), bus.subscribe(buffer=8)
    bus.publish(ev(1))
    bus.publish(ev(2))  # must not block
    assert slow.dropped == 1 and fast.dropped == 0
    slow.close()
    fast.close()
    assert [e.data["n"] async for e in slow] == [1]
    assert [e.data["n"] async for e in fast] == [1, 2]


async def test_reading_frees_buffer_space() -> None:
    bus = EventBus()
    sub = bus.subscribe(buffer=1)
    bus.publish(ev(1))
    assert (await sub.get()).data["n"] == 1  # type: ignore[union-attr]
    bus.publish(ev(2))
    assert sub.dropped == 0
    assert (await sub.get()).data["n"] == 2  # type: ignore[union-attr]


async def test_unsubscribe_ends_iteration_and_is_idempotent() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    bus.unsubscribe(sub)
    bus.unsubscribe(sub)
    assert sub.closed and len(bus) == 0
    assert [e async for e in sub] == []
    bus.publish(ev(1))  # after unsubscribe: not delivered, no error
    assert await sub.get() is None


async def test_publish_with_no_subscribers_is_fine() -> None:
    EventBus().publish(ev(1))


async def test_bus_is_usable_as_event_sink() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    bus(ev(7))
    assert (await sub.get()).data["n"] == 7  # type: ignore[union-attr]


async def test_publish_from_another_thread_is_delivered() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    threads = [threading.Thread(target=bus.publish, args=(ev(i),)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = [await asyncio.wait_for(sub.get(), timeout=5) for _ in range(5)]
    assert sorted(e.data["n"] for e in got if e) == [0, 1, 2, 3, 4]


async def test_buffer_below_one_is_rejected() -> None:
    with pytest.raises(UsageError):
        EventBus().subscribe(buffer=0)
