"""What a Redis server says about itself: reachable, authenticated, version, eviction, persistence.

``shelly doctor`` asks before a pool runs work, because the journal's guarantees rest on Redis
keeping what it was given: a server that evicts keys under memory pressure (any ``allkeys-*`` or
``volatile-*`` policy — every shelly key carries a retention TTL, so ``volatile-*`` evicts them
too) can drop a run's journal mid-run, and one without AOF or RDB loses every run on restart.

The probe never retries and never raises: a refused connection, a wrong password or a managed
Redis that disables ``CONFIG`` are answers, reported in :class:`RedisProbe`.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from redis.exceptions import AuthenticationError, RedisError, ResponseError

from shelly_dist.redisio.connection import CONNECTION_ERRORS, connect

UNREACHABLE = "unreachable"
AUTH = "auth"
ERROR = "error"


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***`` (safe to print)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass(frozen=True)
class RedisProbe:
    """The answer of :func:`probe_redis`. ``problem`` is empty when the server answered.

    ``maxmemory_policy`` and ``rdb_enabled`` are ``None`` when ``CONFIG GET`` is refused (managed
    Redis often renames or disables it); ``config_error`` then says why.
    """

    url: str
    problem: str = ""
    """``""``, :data:`UNREACHABLE`, :data:`AUTH` or :data:`ERROR`."""
    error: str = ""
    version: str = ""
    maxmemory_policy: str | None = None
    aof_enabled: bool = False
    rdb_enabled: bool | None = None
    config_error: str = ""


async def probe_redis(url: str, *, seconds: float) -> RedisProbe:
    """Connect to ``url`` once (no retries, waiting at most ``seconds``) and read INFO and CONFIG."""
    shown = redact(url)
    client = connect(url, client_name="shelly-doctor", socket_timeout=seconds, connect_timeout=seconds,
                     retries=0, max_connections=2)
    try:
        try:
            server = await client.info("server")
            persistence = await client.info("persistence")
        except AuthenticationError as exc:
            return RedisProbe(shown, problem=AUTH, error=str(exc))
        except ResponseError as exc:  # NOPERM and friends: the ACL user may not run INFO
            if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
                return RedisProbe(shown, problem=AUTH, error=str(exc))
            return RedisProbe(shown, problem=ERROR, error=str(exc))
        except CONNECTION_ERRORS as exc:
            return RedisProbe(shown, problem=UNREACHABLE, error=str(exc) or type(exc).__name__)
        except RedisError as exc:
            return RedisProbe(shown, problem=ERROR, error=f"{type(exc).__name__}: {exc}")
        policy: str | None = None
        rdb: bool | None = None
        config_error = ""
        try:
            policy = str((await client.config_get("maxmemory-policy")).get("maxmemory-policy", "")) or None
            rdb = bool(str((await client.config_get("save")).get("save", "")).strip())
        except RedisError as exc:
            config_error = str(exc) or type(exc).__name__
        return RedisProbe(
            shown,
            version=str(server.get("redis_version", "?")),
            maxmemory_policy=policy,
            aof_enabled=str(persistence.get("aof_enabled", "0")) == "1",
            rdb_enabled=rdb,
            config_error=config_error,
        )
    finally:
        await client.aclose()
