"""Change hints for many channels over one pub/sub connection: a coordinator process's runs.

Each top-level run a coordinator drives waits for its children's joins on its own channel. With a
:class:`~shelly_dist.redisio.subscription.Subscription` each, every run opened a connection of its
own (a TCP connect, ``SUBSCRIBE``, its confirmation, the close); a :class:`Hub` keeps one
connection per process and event loop and adds or drops channels on it (issue 16).

The guarantees are :class:`Subscription`'s (DESIGN.md §3, rule 6): :meth:`Hub.watch` returns once
Redis has confirmed the channel, so a ``PUBLISH`` after the caller's next read cannot be missed;
a :class:`Watch` moves on every message on its channel *and* at least once per poll interval, and
its owner re-reads either way. Opening fails fast (``StoreError`` when Redis does not confirm within
:data:`COMMAND_TIMEOUT`); once open, an outage of any length never ends the pump: it drops the
connection, moves every watch (their owners re-read, and wait the outage out there), and
resubscribes every channel when Redis answers again. A hint published during an outage is lost,
which is why owners re-read after every move — or, knowing what moved it (:meth:`Watch.hints_since`:
each message's data, ``None`` for a poll tick or an outage), after every move that may have
changed what they wait for (a waiting coordinator reads once every entry it waits for has been
announced, not on each join).

A hub made with ``tree=True`` watches run trees' channels only: on a Redis Cluster those are
sharded (:mod:`.sharded`: ``SSUBSCRIBE`` on the node owning each tree's slot, one connection per
such node, each read as it delivers), with the same guarantees; on a single Redis the flag changes
nothing. A cluster node too old for sharded pub/sub fails the watches waiting for confirmation at
once, with the error naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub

from shelly_dist.cancellation import pause
from shelly_dist.errors import StoreError
from shelly_dist.redisio.blocking import backoff, cancellable, is_outage
from shelly_dist.redisio.connection import COMMAND_TIMEOUT, open_pubsub
from shelly_dist.redisio.sharded import ShardedPubSub

logger = logging.getLogger(__name__)

HINTS_KEPT = 10_000
"""Hints a :class:`Watch` keeps before it forgets them (an owner that far behind re-reads all)."""


class Watch:
    """One owner's view of a channel: a generation that moves on each hint or poll tick."""

    def __init__(self, hub: Hub, channel: str) -> None:
        self._hub = hub
        self.channel = channel
        self.generation = 0
        self._waiters: list[asyncio.Future[None]] = []
        self._hints: list[str | None] = []
        self._hints_base = 0
        """Absolute position of ``_hints[0]`` (the log is cut short past :data:`HINTS_KEPT`)."""

    def _move(self, hint: str | None = None) -> None:
        self._hints.append(hint)
        if len(self._hints) > HINTS_KEPT:
            self._hints_base += len(self._hints)
            self._hints = []
        self.generation += 1
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def moved(self, since: int) -> None:
        """Return once the generation differs from ``since`` (at most one poll interval later)."""
        while self.generation == since:
            waiter = self._hub.loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    @property
    def position(self) -> int:
        """Where the hints that come next start (for :meth:`hints_since`)."""
        return self._hints_base + len(self._hints)

    def hints_since(self, position: int) -> tuple[list[str | None], int]:
        """What moved the watch since ``position``, in order, and the position after them: each
        message's data, ``None`` for a poll tick or an outage (anything may have changed; so is a
        position the log no longer reaches). By position, so several owners of one watch each
        see every hint."""
        start = position - self._hints_base
        if start < 0:
            return [None], self.position
        return self._hints[start:], self.position

    async def aclose(self) -> None:
        await self._hub._drop(self)


class Listener(Watch):
    """A watch that hands each move to ``on_move`` (a message's data, ``None`` for a poll tick or
    an outage) and keeps no log: an owner of thousands of channels (a batch waiting for its
    roots) reads what the messages name, not every channel on every tick."""

    def __init__(self, hub: Hub, channel: str, on_move: Callable[[str | None], None]) -> None:
        super().__init__(hub, channel)
        self._on_move = on_move

    def _move(self, hint: str | None = None) -> None:
        self.generation += 1
        self._on_move(hint)


class Hub:
    """Channels of one client over one pub/sub connection, for the event loop that made it."""

    def __init__(self, client: aioredis.Redis, poll_interval: float, *, tree: bool = False) -> None:
        self._client = client
        self._poll = poll_interval
        self._tree = tree
        """Its channels are run trees' channels: sharded on a cluster (:mod:`.sharded`)."""
        self.loop = asyncio.get_running_loop()
        self._watches: dict[str, set[Watch]] = {}
        self._confirmed: dict[str, asyncio.Future[None]] = {}
        self._pubsub: PubSub | ShardedPubSub | None = None
        self._pump_task: asyncio.Task[None] | None = None
        self._sending = asyncio.Lock()
        """Held while a ``SUBSCRIBE`` is sent (a send, not a round trip): redis-py's pub/sub takes its
        connection from the client's pool on its first command, and two first commands at once
        each took one — with hundreds of watches opening together, a bounded pool ran dry."""
        self.outages = 0
        """How many times the connection was lost (every watch moved, messages may be lost): an
        owner that ignores poll ticks re-reads everything when this changes."""

    async def watch(self, channel: str, on_move: Callable[[str | None], None] | None = None) -> Watch:
        """A watch of ``channel``, subscribed and confirmed by Redis; ``StoreError`` if Redis does
        not confirm within :data:`COMMAND_TIMEOUT`. :meth:`Watch.aclose` it when done. With
        ``on_move``, a :class:`Listener` that hands it every move instead of keeping them."""
        watch = Watch(self, channel) if on_move is None else Listener(self, channel, on_move)
        first = channel not in self._watches
        self._watches.setdefault(channel, set()).add(watch)
        if first:
            self._confirmed[channel] = self.loop.create_future()
        confirmed = self._confirmed.get(channel)
        try:
            if first:
                await self._subscribe(channel)
            if confirmed is not None:
                await asyncio.wait_for(asyncio.shield(confirmed), COMMAND_TIMEOUT)
        except (Exception, asyncio.CancelledError) as exc:
            await self._drop(watch)
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise StoreError(f"watch: cannot subscribe to {channel}: {exc or type(exc).__name__}") from exc
        return watch

    async def _subscribe(self, channel: str) -> None:
        """Subscribe on the open connection; with none open (the first watch, or an outage) the
        pump subscribes every channel when it opens one."""
        if self._pump_task is None or self._pump_task.done():
            self._pump_task = asyncio.create_task(self._pump())
        elif self._pubsub is not None:
            async with self._sending:
                await self._pubsub.subscribe(channel)

    async def _drop(self, watch: Watch) -> None:
        watches = self._watches.get(watch.channel)
        if watches is None or watch not in watches:
            return
        watches.discard(watch)
        if watches:
            return
        del self._watches[watch.channel]
        self._confirmed.pop(watch.channel, None)
        if self._pubsub is not None:
            with contextlib.suppress(Exception):  # gone with the connection in an outage anyway
                await self._pubsub.unsubscribe(watch.channel)

    def _fail_unconfirmed(self, exc: StoreError) -> None:
        for confirmed in self._confirmed.values():
            if not confirmed.done():
                confirmed.set_exception(exc)

    def _move_all(self) -> None:
        for watches in self._watches.values():
            for watch in watches:
                watch._move()

    async def _pump(self) -> None:
        """Read the connection: confirm subscriptions, move the watches of each message's channel,
        and every watch once per poll interval; an outage drops and reopens the connection."""
        tick = time.monotonic() + self._poll
        attempt = 0
        while True:
            try:
                if self._pubsub is None:
                    self._pubsub = await open_pubsub(self._client, tree=self._tree)
                    if self._watches:
                        async with self._sending:
                            await cancellable(self._pubsub.subscribe(*self._watches))
                wait = max(0.0, tick - time.monotonic())
                if self._pubsub.connection is None:  # nothing subscribed on it yet: nothing to read
                    await pause(wait)
                    message = None
                else:
                    message = await cancellable(self._pubsub.get_message(timeout=wait))
                attempt = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if is_outage(exc):
                    logger.debug("hub: pub/sub connection lost; resubscribing", exc_info=True)
                elif isinstance(exc, StoreError):  # named by us (a cluster node too old): no watch waits it out
                    logger.error("hub: %s", exc)
                    self._fail_unconfirmed(exc)
                else:
                    logger.exception("hub: pub/sub failed; re-reading every %.1fs", self._poll)
                await self._close_pubsub()
                self.outages += 1
                self._move_all()
                await pause(min(backoff(attempt), self._poll))
                attempt += 1
                tick = time.monotonic() + self._poll
                continue
            if message is not None:
                kind, channel = message.get("type"), message.get("channel")
                if kind == "subscribe":
                    confirmed = self._confirmed.get(str(channel))
                    if confirmed is not None and not confirmed.done():
                        confirmed.set_result(None)
                elif kind == "message":
                    data = message.get("data")
                    hint = data.decode() if isinstance(data, bytes) else str(data)
                    for watch in self._watches.get(str(channel), ()):
                        watch._move(hint)
            if time.monotonic() >= tick:
                self._move_all()
                tick = time.monotonic() + self._poll

    async def _close_pubsub(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    async def aclose(self) -> None:
        """Stop the pump and close the connection (every watch stops moving)."""
        if self._pump_task is not None:
            self._pump_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._pump_task
        await self._close_pubsub()
