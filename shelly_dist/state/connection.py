"""The one place that builds Redis clients, and the translation of Redis errors.

Everything else receives a client; nothing else calls ``Redis.from_url``. The policy:

- ``decode_responses=True``: everything we store is JSON text or a name, so callers get ``str``
  and never juggle bytes. Code that needs raw bytes must build its own pool on purpose.
- Commands retry on connection and timeout errors with exponential backoff (5 attempts, capped at
  2 s): a Redis restart or a killed connection is survived by the next command.
- The pool blocks rather than fails when all its connections are busy (redis-py's default pool
  raises ``MaxConnectionsError`` past 100, which a burst of concurrent watches reaches).
- ``socket_timeout`` (30 s) bounds a command; blocking reads (``XREAD BLOCK``, pub/sub waits) must
  use shorter blocks than that. ``health_check_interval`` pings idle connections before reuse.

Redis exceptions never leave the Redis modules: :func:`redis_errors` turns them into
:class:`~shelly_dist.errors.StoreError` naming the operation.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shelly_dist.errors import StoreError

COMMAND_TIMEOUT = 30.0
MAX_CONNECTIONS = 1000
"""Connections one client may open. Past it, callers wait for a free one (a blocking pool) instead
of failing: hundreds of runs or batch items waiting at once each hold a pub/sub connection."""
CONNECT_TIMEOUT = 5.0
RETRIES = 5


def connect(
    url: str,
    *,
    client_name: str | None = None,
    socket_timeout: float = COMMAND_TIMEOUT,
    max_connections: int | None = None,
    connect_timeout: float = CONNECT_TIMEOUT,
    retries: int = RETRIES,
) -> aioredis.Redis:
    """A client for ``url`` (``redis://``, ``rediss://``, ``unix://``) with our retry policy.

    The client connects lazily; close it with ``await client.aclose()``. ``client_name`` is set on
    every connection (visible in ``CLIENT LIST``; operators and tests find connections by it).
    A probe that must answer quickly (``shelly doctor``) passes a short ``connect_timeout`` and
    ``retries=0``.
    """
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections or MAX_CONNECTIONS,
        timeout=COMMAND_TIMEOUT,
        decode_responses=True,
        socket_connect_timeout=connect_timeout,
        socket_timeout=socket_timeout,
        socket_keepalive=True,
        retry=Retry(ExponentialBackoff(cap=2.0, base=0.05), retries),
        retry_on_error=[RedisConnectionError, RedisTimeoutError],
        health_check_interval=30,
        client_name=client_name,
    )
    return aioredis.Redis.from_pool(pool)


@contextmanager
def redis_errors(origin: str, *, key: str | None = None, task_id: str | None = None) -> Iterator[None]:
    """Re-raise Redis errors in the body as ``StoreError`` (``{origin}: redis error: …``)."""
    try:
        yield
    except RedisError as exc:
        raise StoreError(f"{origin}: redis error: {type(exc).__name__}: {exc}", key=key, task_id=task_id) from exc


CONNECTION_ERRORS: tuple[type[Exception], ...] = (RedisConnectionError, RedisTimeoutError, OSError)
"""Errors that mean "the connection is gone" (as opposed to a bad command)."""
