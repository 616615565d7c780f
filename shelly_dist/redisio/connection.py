"""The one place that builds Redis clients, and the translation of Redis errors.

Everything else receives a client; nothing else calls ``Redis.from_url``. The policy:

- ``decode_responses=True``: everything we store is JSON text or a name, so callers get ``str``
  and never juggle bytes. Code that needs raw bytes must build its own pool on purpose.
- Commands retry on connection and timeout errors with exponential backoff (5 attempts, capped at
  2 s): a Redis restart or a killed connection is survived by the next command. A refused or
  missing password is never retried (:class:`_Retry`): it fails at once, named.
- The pool blocks rather than fails when all its connections are busy (redis-py's default pool
  raises ``MaxConnectionsError`` past 100, which a burst of concurrent watches reaches).
- ``socket_timeout`` (30 s) bounds a command; blocking reads (``XREAD BLOCK``, pub/sub waits) must
  use shorter blocks than that. ``health_check_interval`` pings idle connections before reuse.
- One ``DriverInfo`` for every connection (:func:`_driver_info`): redis-py ≥ 7 otherwise builds one
  per new connection, reading its own version from the installed distributions each time
  (``importlib.metadata``: 0.8 ms of CPU per connection here, 4 % of a fan-out worker's samples).
- On Python 3.11 a single Redis's connections send without a task per command
  (:mod:`.timed_send`: ≈ 16 µs of client CPU per command); a cluster's keep redis-py's send.

A Redis Cluster is named by its URL scheme, ``redis+cluster://host:port`` (or
``rediss+cluster://``; any one node, the client discovers the rest): :func:`connect` then returns a
``redis.asyncio.cluster.RedisCluster`` with the same policy (per node: redis-py keeps a pool per
node and loads each script on the node that runs it). Every script and transaction we run keeps to
one hash slot (``redisio/keys.py``). The run trees' wake-up channels are sharded pub/sub there
(``SPUBLISH``/``SSUBSCRIBE``, :mod:`.sharded`), so a cluster needs Redis 7.0+. The Celery
broker cannot be a cluster (kombu has no cluster transport): keep it on a single Redis or RabbitMQ.

Redis exceptions never leave the Redis modules: :func:`redis_errors` turns them into
:class:`~shelly_dist.errors.StoreError` naming the operation.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import AuthenticationError, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shelly_dist.errors import StoreError
from shelly_dist.redisio.sharded import ShardedPubSub
from shelly_dist.redisio.timed_send import timed_send

COMMAND_TIMEOUT = 30.0
MAX_CONNECTIONS = 1000
"""Connections one client may open. Past it, callers wait for a free one (a blocking pool) instead
of failing: hundreds of runs or batch items waiting at once each hold a pub/sub connection."""
CONNECT_TIMEOUT = 5.0
RETRIES = 5
CLUSTER_SCHEMES = {"redis+cluster://": "redis://", "rediss+cluster://": "rediss://"}
"""URL schemes that name a Redis Cluster, and the plain scheme redis-py is given."""


class _Retry(Retry):
    """redis-py's retry, except that authentication is never retried. ``AuthenticationError`` is a
    ``ConnectionError``, so a Redis that wants a password, given none, was retried by the
    connection's retry inside the command's retry: ~22 s of silence before the one line naming it
    (issue 25). A password does not become right by asking again."""

    async def call_with_retry(self, do: Any, fail: Any, is_retryable: Any = None,  # type: ignore[override]
                              with_failure_count: bool = False) -> Any:
        def retryable(error: Exception) -> bool:
            if isinstance(error, AuthenticationError):
                return False
            return bool(is_retryable(error)) if is_retryable is not None else True

        return await super().call_with_retry(do, fail, retryable, with_failure_count)


def cluster_url(url: str) -> str | None:
    """The plain ``redis://`` URL of a cluster URL (``redis+cluster://…``), or None for a single
    Redis."""
    for scheme, plain in CLUSTER_SCHEMES.items():
        if url.startswith(scheme):
            return plain + url[len(scheme):]
    return None


def sync_client(url: str, **options: Any) -> redis.Redis:
    """A synchronous client for one-off checks outside an event loop (``shelly worker``'s start
    check): a ``redis.RedisCluster`` for a cluster URL, else ``redis.Redis``."""
    plain = cluster_url(url)
    if plain is not None:
        return redis.RedisCluster.from_url(plain, **options)  # type: ignore[return-value]
    return redis.Redis.from_url(url, **options)


def is_cluster(client: object) -> bool:
    """Whether ``client`` talks to a Redis Cluster (scripts may then touch one slot only)."""
    return isinstance(client, RedisCluster)


async def open_pubsub(client: aioredis.Redis, *, tree: bool = False) -> PubSub | ShardedPubSub:
    """A pub/sub of ``client``. A cluster client learns its slot map first: its pub/sub picks the
    node by the channel's slot and does not load the map itself (classic pub/sub reaches every
    node of a cluster, so any node serves). ``tree``: the channels are run trees' channels, which
    a cluster publishes sharded (:mod:`.sharded`); on a single Redis the flag changes nothing."""
    if isinstance(client, RedisCluster):
        await client.initialize()
        if tree:
            return ShardedPubSub(client)
    return client.pubsub()


def connect(
    url: str,
    *,
    client_name: str | None = None,
    socket_timeout: float = COMMAND_TIMEOUT,
    max_connections: int | None = None,
    connect_timeout: float = CONNECT_TIMEOUT,
    retries: int = RETRIES,
) -> aioredis.Redis:
    """A client for ``url`` (``redis://``, ``rediss://``, ``unix://``, or a cluster's
    ``redis+cluster://``) with our retry policy.

    The client connects lazily; close it with ``await client.aclose()``. ``client_name`` is set on
    every connection (visible in ``CLIENT LIST``; operators and tests find connections by it).
    A probe that must answer quickly (``shelly doctor``) passes a short ``connect_timeout`` and
    ``retries=0``.
    """
    options = _policy(
        client_name=client_name,
        socket_timeout=socket_timeout,
        max_connections=max_connections,
        connect_timeout=connect_timeout,
        retries=retries,
    )
    plain = cluster_url(url)
    if plain is not None:
        # The same commands, routed by slot; redis-py keeps one pool per node.
        return RedisCluster.from_url(plain, **options)  # type: ignore[return-value]
    pool = aioredis.BlockingConnectionPool.from_url(url, timeout=COMMAND_TIMEOUT, **options)
    pool.connection_class = timed_send(pool.connection_class)  # the class from_url chose for the scheme
    return aioredis.Redis.from_pool(pool)


def _policy(
    *,
    client_name: str | None,
    socket_timeout: float,
    max_connections: int | None,
    connect_timeout: float,
    retries: int,
) -> dict[str, Any]:
    """The connection options every client gets, single Redis or cluster alike (the policy in the
    module docstring)."""
    return {
        "max_connections": max_connections or MAX_CONNECTIONS,
        "decode_responses": True,
        "socket_connect_timeout": connect_timeout,
        "socket_timeout": socket_timeout,
        "socket_keepalive": True,
        "retry": _Retry(ExponentialBackoff(cap=2.0, base=0.05), retries),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        "health_check_interval": 30,
        "client_name": client_name,
        **_driver_info(),
    }


@functools.cache
def _driver_info() -> dict[str, Any]:
    """``driver_info`` built once, for redis-py versions that take it (none before 7)."""
    try:
        from redis.driver_info import DriverInfo
    except ImportError:
        return {}
    return {"driver_info": DriverInfo()}


@contextmanager
def redis_errors(origin: str, *, key: str | None = None, task_id: str | None = None) -> Iterator[None]:
    """Re-raise Redis errors in the body as ``StoreError`` (``{origin}: redis error: …``)."""
    try:
        yield
    except RedisError as exc:
        raise StoreError(f"{origin}: redis error: {type(exc).__name__}: {exc}", key=key, task_id=task_id) from exc


CONNECTION_ERRORS: tuple[type[Exception], ...] = (RedisConnectionError, RedisTimeoutError, OSError)
"""Errors that mean "the connection is gone" (as opposed to a bad command)."""
