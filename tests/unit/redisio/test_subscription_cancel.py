"""A cancelled watch ends even when the Redis client under it swallows the cancellation."""

from __future__ import annotations

import asyncio
from typing import Any

from shelly_dist.redisio.subscription import Subscription


class SwallowingPubSub:
    """Confirms the SUBSCRIBE, then reads like Python 3.11's ``wait_for`` racing a cancel: the
    cancellation is caught and the read returns as if it had timed out."""

    def __init__(self) -> None:
        self.confirmed = False
        self.swallowed = False
        self.reading = asyncio.Event()

    async def subscribe(self, channel: str) -> None:
        return None

    async def get_message(self, timeout: float | None = None) -> dict[str, Any] | None:  # noqa: ASYNC109 (redis-py API)
        if not self.confirmed:
            self.confirmed = True
            return {"type": "subscribe"}
        self.reading.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if self.swallowed:
                raise
            self.swallowed = True
            return None  # the first cancellation is lost here
        return None

    async def aclose(self) -> None:
        return None


class Client:
    def __init__(self) -> None:
        self.pubsub_obj = SwallowingPubSub()

    def pubsub(self) -> SwallowingPubSub:
        return self.pubsub_obj


async def test_cancelling_a_wait_whose_read_swallows_the_cancel_still_cancels() -> None:
    client = Client()

    async def watch_forever() -> None:
        async with Subscription(client, "ch", poll_interval=3600) as sub:  # type: ignore[arg-type]
            while True:
                await sub.wait(None)

    task = asyncio.create_task(watch_forever())
    await asyncio.wait_for(client.pubsub_obj.reading.wait(), 10)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=10)
    assert done, "the watch went on after its cancellation was swallowed"
    assert task.cancelled()
