"""Sharded pub/sub for the run trees' wake-up channels on a Redis Cluster (Redis 7.0+).

A classic ``PUBLISH`` on a cluster is forwarded over the cluster bus to every other node (a
subscriber may be connected to any of them), so every node pays for every message: with the
journals on three nodes each child's join cost each node a floor that adding nodes does not shrink
(``docs/benchmarks.md``, "The journals on a 3-node Redis Cluster"). A tree's channels
(``Keys.run_changed`` / ``Keys.run_ended``) carry the tree's hash tag, so on a cluster they are
published with ``SPUBLISH`` and watched with ``SSUBSCRIBE``: a message stays on the node that owns
the tree's slot, the node that already runs the tree's scripts. On a single Redis nothing changes:
classic ``PUBLISH``/``SUBSCRIBE``, the same commands and cost as before.

What this module holds, so that publishers and subscribers agree:

- :func:`script_text`: a script's text for a client; on a cluster each ``redis.call('PUBLISH', …``
  becomes ``SPUBLISH`` (the registry's scripts publish only tree channels; Redis 7.0 runs
  ``SPUBLISH`` inside a script whose keys share the channel's slot).
- :func:`publish_tree`: the same choice for a publish made from Python.
- :class:`ShardedPubSub`: the calls the hub and :class:`~shelly_dist.redisio.subscription.Subscription`
  make on a classic ``PubSub`` (``subscribe``, ``unsubscribe``, ``get_message``, ``aclose``,
  ``connection``), made with redis-py's ``ClusterPubSub`` sharded calls. redis-py keeps one
  connection per node owning a watched channel and moves a channel when its slot moves; its own
  reader (``get_sharded_message``) visits the nodes in turn, blocking on each for the whole
  timeout, so a message on the second node would wait out the first's timeout. Here each node's
  connection has a reader task of its own, feeding one inbox: a message is handed on as it arrives.
  A slot that moves (resharding, failover) shows as a ``sunsubscribe`` this side did not ask for,
  or a ``MOVED`` reply: the reader then refreshes the slot map and raises :class:`SlotMoved`, a
  lost connection to the hub, which resubscribes every channel on its owner now and has its
  watches re-read (redis-py alone would follow only once some command of the client met the move).
- :func:`check_sharded_pubsub`: a cluster node older than 7.0 has no sharded pub/sub; the start
  checks (``shelly worker``, a coordinator's first run) fail with this error instead of every wait
  timing out.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any

import redis
from redis.asyncio.cluster import ClusterPubSub, RedisCluster
from redis.exceptions import AskError, MovedError
from redis.exceptions import ConnectionError as RedisConnectionError

from shelly_dist.errors import StoreError

NEEDS = ("a Redis Cluster needs Redis 7.0 or newer on every node: the run trees' wake-up channels "
         "are sharded pub/sub (SPUBLISH/SSUBSCRIBE)")
"""The requirement, as every error about it names it."""

MIN_VERSION = (7, 0)
READ_BLOCK = 1.0
"""Seconds one node's reader blocks per read before it checks whether its node is still in use
(well under the client's socket timeout)."""

_PUBLISH = re.compile(r"redis\.call\('PUBLISH', ")
_TYPES = {"ssubscribe": "subscribe", "sunsubscribe": "unsubscribe", "smessage": "message"}
"""Sharded message types as the classic ones the hub and Subscription read."""


def is_cluster_client(client: object) -> bool:
    """Whether ``client`` (async or synchronous) talks to a Redis Cluster."""
    return isinstance(client, (RedisCluster, redis.RedisCluster))


def script_text(client: object, text: str) -> str:
    """``text`` as ``client`` runs it: on a cluster every ``PUBLISH`` a script makes is a sharded
    ``SPUBLISH`` (callers pass only scripts whose published channels are tree channels)."""
    return _PUBLISH.sub("redis.call('SPUBLISH', ", text) if is_cluster_client(client) else text


async def publish_tree(client: Any, channel: str, message: str) -> int:
    """Publish on a tree channel: ``SPUBLISH`` on a cluster, ``PUBLISH`` on a single Redis."""
    if isinstance(client, RedisCluster):
        return int(await client.spublish(channel, message))
    return int(await client.publish(channel, message))


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:2])


def too_old(infos: dict[str, Any]) -> list[str]:
    """``host:port (version)`` of each node, in a ``{node: INFO server}`` reply, older than 7.0."""
    return [f"{node} ({info.get('redis_version')})" for node, info in sorted(infos.items())
            if isinstance(info, dict) and _version(str(info.get("redis_version", "0"))) < MIN_VERSION]


def refuse_old(infos: dict[str, Any]) -> None:
    """``StoreError`` naming :data:`NEEDS` and each node :func:`too_old` finds. ``infos`` as
    redis-py answers ``INFO server`` sent to the primaries: by node, or the bare reply of a
    cluster with one primary."""
    old = too_old({"the cluster's one primary": infos} if "redis_version" in infos else infos)
    if old:
        raise StoreError(f"redis: {NEEDS}; older: {', '.join(old)}")


async def check_sharded_pubsub(client: Any) -> None:
    """On a cluster, ``StoreError`` naming every primary older than Redis 7.0 (nothing to check on
    a single Redis, whose channels stay classic)."""
    if isinstance(client, RedisCluster):
        refuse_old(await client.info("server", target_nodes=RedisCluster.PRIMARIES))


def check_sharded_pubsub_sync(client: Any) -> None:
    """:func:`check_sharded_pubsub` for a synchronous client (``shelly worker``'s start check)."""
    if isinstance(client, redis.RedisCluster):
        refuse_old(client.info("server", target_nodes=redis.RedisCluster.PRIMARIES))


class SlotMoved(RedisConnectionError):
    """A watched channel's slot moved to another node (resharding, failover): its reader answers
    as a lost connection does, so the hub reopens and resubscribes every channel on its slot's
    owner now, and its watches re-read (a hint sent during the move may be lost)."""


class ShardedPubSub:
    """Sharded channels of a cluster behind a classic ``PubSub``'s calls (the module docstring).
    Messages come back with the classic types (``subscribe``, ``message``, ``unsubscribe``)."""

    def __init__(self, client: RedisCluster) -> None:
        self._pubsub: ClusterPubSub = client.pubsub()
        self._client = client
        self._readers: dict[str, asyncio.Task[None]] = {}
        self._inbox: asyncio.Queue[dict[str, Any] | BaseException] = asyncio.Queue()
        self._leaving: set[str] = set()
        self._subscribed = False
        """Channels this side unsubscribed: any other ``sunsubscribe`` is Redis's, on a slot move."""

    @property
    def connection(self) -> object | None:
        """None until the first ``subscribe`` (nothing to read yet), as a classic ``PubSub``'s; then
        set for good, as a classic one's stays when its last channel leaves: a reader of the hub
        waits on the inbox, which a later subscription's confirmation reaches at once (redis-py
        closes a node's connection when its last channel leaves, and opens one for the next)."""
        return self if self._subscribed else None

    async def subscribe(self, *channels: str) -> None:
        """``SSUBSCRIBE`` each channel on the node owning its slot (one slot per command)."""
        for channel in channels:
            try:
                await self._pubsub.ssubscribe(channel)
            except redis.ResponseError as exc:
                if "unknown command" in str(exc).lower():
                    raise StoreError(f"watch {channel}: {NEEDS} ({exc})") from exc
                raise
        self._subscribed = True
        self._start_readers()

    async def unsubscribe(self, *channels: str) -> None:
        self._leaving.update(channels)
        await self._pubsub.sunsubscribe(*channels)

    async def get_message(self, timeout: float) -> dict[str, Any] | None:  # noqa: ASYNC109 - a PubSub's call
        """The next message from any node, or None after ``timeout`` seconds; a node's read error
        is raised here (the caller reopens, as after a classic connection's)."""
        self._start_readers()
        try:
            async with asyncio.timeout(timeout):
                item = await self._inbox.get()
        except TimeoutError:
            return None
        if isinstance(item, BaseException):
            raise item
        kind = str(item.get("type"))
        return {**item, "type": _TYPES.get(kind, kind)}

    def _start_readers(self) -> None:
        for name in self._pubsub.node_pubsub_mapping:
            reader = self._readers.get(name)
            if reader is None or reader.done():
                self._readers[name] = asyncio.create_task(self._read(name))

    async def _read(self, name: str) -> None:
        """Hand on each message of node ``name``'s connection until redis-py drops it (its channels
        unsubscribed or moved); a read error goes to the inbox and ends the reader. A node's
        connection still being opened (redis-py lists it before its first ``SSUBSCRIBE`` is sent)
        ends the reader too: :meth:`subscribe` starts one once the command is sent."""
        node = self._client.get_node(node_name=name)
        try:
            while True:
                pubsub = self._pubsub.node_pubsub_mapping.get(name)
                if node is None or pubsub is None or pubsub.connection is None:
                    return
                message = await self._pubsub.get_sharded_message(target_node=node, timeout=READ_BLOCK)
                if message is None:
                    continue
                if message.get("type") == "sunsubscribe" and not self._left(str(message.get("channel"))):
                    # Redis dropped the channel: its slot left this node. Learn the new owner.
                    await self._client.nodes_manager.initialize()
                    self._inbox.put_nowait(SlotMoved(f"sharded pub/sub on {name}: {message.get('channel')} moved"))
                    return
                self._inbox.put_nowait(message)
        except asyncio.CancelledError:
            raise
        except AskError as exc:  # a watched channel's slot moved (MovedError is an AskError)
            if isinstance(exc, MovedError):
                await self._client.nodes_manager.move_slot(exc)  # the reopening asks the new owner
            self._inbox.put_nowait(SlotMoved(f"sharded pub/sub on {name}: {exc}"))
        except Exception as exc:
            self._inbox.put_nowait(exc)

    def _left(self, channel: str) -> bool:
        """Whether this side unsubscribed ``channel`` (forgotten once confirmed)."""
        if channel in self._leaving:
            self._leaving.discard(channel)
            return True
        return False

    async def aclose(self) -> None:
        readers, self._readers = list(self._readers.values()), {}
        for reader in readers:
            reader.cancel()
        for reader in readers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
        await self._pubsub.aclose()
