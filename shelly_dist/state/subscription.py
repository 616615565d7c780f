"""Change hints over Redis pub/sub, for watches that span processes.

A :class:`Subscription` is entered before a watch's first read and waits until Redis has confirmed
the SUBSCRIBE, so a PUBLISH made after that read cannot be missed. Its :meth:`wait` returns on any
message *or* after the poll interval, and the watch re-reads either way (DESIGN.md §3, rule 6).

A dropped connection is not fatal: the subscription reopens once per failure (the client's retry
policy backs off while connecting) and the watch re-reads, so a killed connection resumes the
watch; if Redis stays unreachable, the wait raises ``StoreError`` naming the channel. Never a hang.
"""

from __future__ import annotations

import asyncio
import logging
import time
from types import TracebackType

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from shelly_dist.errors import StoreError
from shelly_dist.state.connection import COMMAND_TIMEOUT, CONNECTION_ERRORS, open_pubsub

logger = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL = 1.0
"""Seconds a watch waits for a hint before re-reading anyway: the most a lost hint can cost."""


class Subscription:
    """A subscription to one channel; use as ``async with``. One task waits on it at a time."""

    def __init__(self, client: aioredis.Redis, channel: str, *, poll_interval: float = DEFAULT_POLL_INTERVAL) -> None:
        self._client = client
        self._channel = channel
        self._poll = poll_interval
        self._pubsub: PubSub | None = None

    async def __aenter__(self) -> Subscription:
        try:
            await self._open()
        except (RedisError, OSError) as exc:
            await self._close()
            raise StoreError(f"watch: cannot subscribe to {self._channel}: {exc}") from exc
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._close()

    async def _open(self) -> None:
        self._pubsub = await open_pubsub(self._client)
        await self._pubsub.subscribe(self._channel)
        deadline = time.monotonic() + COMMAND_TIMEOUT
        while time.monotonic() < deadline:
            message = await self._pubsub.get_message(timeout=deadline - time.monotonic())
            if message is not None and message.get("type") == "subscribe":
                return
        raise StoreError(f"watch: no confirmation subscribing to {self._channel}")

    async def _close(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is None:
            return
        try:
            await pubsub.aclose()
        except (RedisError, OSError):
            logger.debug("closing pub/sub on %s failed", self._channel, exc_info=True)

    async def wait(self, timeout: float | None) -> None:  # noqa: ASYNC109 - deadline is part of the contract
        """Return on a message, after ``min(timeout, poll interval)``, or after a reconnect."""
        limit = self._poll if timeout is None else min(timeout, self._poll)
        if self._pubsub is None:
            raise StoreError(f"watch: subscription to {self._channel} is not open")
        try:
            await self._pubsub.get_message(timeout=limit)
        except CONNECTION_ERRORS as exc:
            _reraise_swallowed_cancel()
            logger.warning("watch: connection lost on %s (%s); resubscribing", self._channel, exc)
            await self._close()
            try:
                await self._open()
            except (RedisError, OSError) as again:
                raise StoreError(
                    f"watch: connection to Redis lost on {self._channel} and not restored: {again}"
                ) from again
        except RedisError as exc:
            raise StoreError(f"watch: redis error on {self._channel}: {exc}") from exc
        _reraise_swallowed_cancel()


def _reraise_swallowed_cancel() -> None:
    """Raise ``CancelledError`` when this task was cancelled but a library under the read turned
    the cancellation into a timeout or a plain return (Python 3.11's ``asyncio.wait_for`` does when
    the cancel and its own timeout coincide, as fakeredis's read uses it). Without this, a watch
    that is cancelled at the wrong instant would re-read and wait forever."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
