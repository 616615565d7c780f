"""Following a session's event stream against the real Redis: a follower ends when cancelled,
also at the instant redis-py swallows the cancellation (issue 12, measured failure 1)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import pytest

from shelly_dist.redisio.connection import connect
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.client.events import read_events

pytestmark = pytest.mark.integration


async def test_a_follower_cancelled_while_its_xread_is_being_sent_ends(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py sends each command through ``asyncio.wait_for``; on Python 3.11 a cancellation
    that lands while the send completes is swallowed and the read goes on. Here the follower is
    cancelled at exactly that instant, every time, as ``shelly run``'s event tail was: when the
    ``XREAD`` is handed to the socket's writer, which every send reaches (redis-py's own, inside its
    ``wait_for`` task, and ``redisio/timed_send.py``'s, which has no task)."""
    follower: asyncio.Task[None] | None = None
    cancels = 0
    real_writelines = asyncio.StreamWriter.writelines

    def write_then_cancel_the_follower(self: asyncio.StreamWriter, data: Iterable[bytes]) -> None:
        nonlocal cancels
        data = list(data)
        if follower is not None and not follower.done() and b"XREAD" in b"".join(data)[:64].upper():
            cancels += 1
            follower.cancel()
        real_writelines(self, data)

    monkeypatch.setattr(asyncio.StreamWriter, "writelines", write_then_cancel_the_follower)
    client = connect(redis_url)

    async def follow() -> None:
        async for _ in read_events(client, Keys(key_prefix), "f" * 16, follow=True, block_ms=100):
            pass

    try:
        follower = asyncio.create_task(follow())
        done, _ = await asyncio.wait({follower}, timeout=30)
        assert done, f"the follower kept reading after {cancels} cancellations"
        assert follower.cancelled() and cancels == 1
    finally:
        if follower is not None:
            follower.cancel()
        await client.aclose()
