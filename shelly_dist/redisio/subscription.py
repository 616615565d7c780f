"""Change hints over Redis pub/sub, for watches that span processes.

A :class:`Subscription` is entered before a watch's first read and waits until Redis has confirmed
the SUBSCRIBE, so a PUBLISH made after that read cannot be missed. Its :meth:`wait` returns on any
message *or* after the poll interval, and the watch re-reads either way (DESIGN.md §3, rule 6).

Opening fails fast (``StoreError`` naming the channel, when Redis does not answer then); once open,
waiting survives: a dropped connection or a Redis outage of any length never escapes a wait (it
returns after its time, as without a message, and the next wait resubscribes, through
:func:`~shelly_dist.redisio.blocking.read_through`), and a cancelled wait always ends, even when the
client under it swallows the cancellation. A hint published during an outage is lost, which is
why the caller re-reads after every wait — the caller's re-read is what waits the outage out.
"""

from __future__ import annotations

import logging
import time
from types import TracebackType

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from shelly_dist.errors import StoreError
from shelly_dist.redisio.blocking import is_outage, read_through
from shelly_dist.redisio.connection import COMMAND_TIMEOUT, open_pubsub
from shelly_dist.redisio.sharded import ShardedPubSub

logger = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL = 1.0
"""Seconds a watch waits for a hint before re-reading anyway: the most a lost hint can cost."""


class Subscription:
    """A subscription to one channel; use as ``async with``. One task waits on it at a time."""

    def __init__(self, client: aioredis.Redis, channel: str, *, poll_interval: float = DEFAULT_POLL_INTERVAL,
                 tree: bool = False) -> None:
        self._client = client
        self._channel = channel
        self._poll = poll_interval
        self._tree = tree
        """The channel is a run tree's: sharded on a cluster (:mod:`.sharded`)."""
        self._pubsub: PubSub | ShardedPubSub | None = None
        self._entered = False

    async def __aenter__(self) -> Subscription:
        try:
            await self._open()
        except (RedisError, OSError) as exc:
            await self._close()
            raise StoreError(f"watch: cannot subscribe to {self._channel}: {exc}") from exc
        except StoreError:  # named already (a cluster node too old for a tree channel)
            await self._close()
            raise
        self._entered = True
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._entered = False
        await self._close()

    async def _open(self) -> None:
        self._pubsub = await open_pubsub(self._client, tree=self._tree)
        await self._pubsub.subscribe(self._channel)
        deadline = time.monotonic() + COMMAND_TIMEOUT
        while time.monotonic() < deadline:
            message = await self._pubsub.get_message(timeout=deadline - time.monotonic())
            if message is not None and message.get("type") == "subscribe":
                return
        raise StoreError(f"watch: no confirmation subscribing to {self._channel}") from TimeoutError()

    async def _close(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is None:
            return
        try:
            await pubsub.aclose()
        except (RedisError, OSError):
            logger.debug("closing pub/sub on %s failed", self._channel, exc_info=True)

    async def message(self, timeout: float | None) -> str | None:  # noqa: ASYNC109 - deadline is part of the contract
        """The data of the next message on the channel, or ``None`` after ``min(timeout, poll
        interval)`` without one. During an outage it returns ``None`` after that time too, and the
        next call resubscribes once Redis answers: the caller re-reads either way."""
        if not self._entered:
            raise StoreError(f"watch: subscription to {self._channel} is not open")
        limit = self._poll if timeout is None else min(timeout, self._poll)

        async def read() -> dict[str, object] | None:
            if self._pubsub is None:  # lost in an outage: resubscribe before waiting again
                await self._open()
                return None
            return await self._pubsub.get_message(timeout=limit)

        try:
            message = await read_through(f"watch {self._channel}", read, on_outage=self._close,
                                         until=time.monotonic() + limit)
        except Exception as exc:
            if is_outage(exc):
                return None  # still down after the wait's time: the caller re-reads (and waits there)
            if isinstance(exc, RedisError):
                raise StoreError(f"watch: redis error on {self._channel}: {exc}") from exc
            raise
        if message is None or message.get("type") != "message":
            return None
        return str(message.get("data"))

    async def wait(self, timeout: float | None) -> None:  # noqa: ASYNC109 - deadline is part of the contract
        """Return on a message, after ``min(timeout, poll interval)``, or after a reconnect."""
        await self.message(timeout)
