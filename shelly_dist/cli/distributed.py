"""What the operations commands (``events``, ``runs``, ``cancel``, ``flower``) share: the
distributed settings of the config, and a Redis client for them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from shelly_dist.engine.config import find_config, load_config
from shelly_dist.errors import UsageError

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from shelly_dist.redisio.keys import Keys
    from shelly_dist.runtime.celery import RuntimeSettings


def load_settings(config_path: str | None, shelly_dir: str) -> RuntimeSettings:
    """The ``distributed:`` settings; a ``ConfigError`` (exit 2) when no broker is configured."""
    from shelly_dist.engine.config_runtime import runtime_settings

    return runtime_settings(load_config(find_config(config_path, shelly_dir)))


@asynccontextmanager
async def redis_for(
    config_path: str | None, shelly_dir: str, command: str = "shelly"
) -> AsyncIterator[tuple[aioredis.Redis, Keys]]:
    """The configured Redis and its key prefix, for commands that read or write run journals and
    events from outside the run (``runs``, ``cancel``, ``events``): they need Redis, not a broker;
    none configured is a ``UsageError`` (exit 2) naming what to set."""
    from shelly_dist.redisio.connection import connect
    from shelly_dist.redisio.keys import Keys

    distributed = load_config(find_config(config_path, shelly_dir)).distributed
    redis_url = distributed.effective_redis_url()
    if not redis_url:
        raise UsageError(f"{command}: the run journals live in Redis: set distributed.redis_url in the config "
                         "(or a Redis distributed.broker_url, or SHELLY_REDIS_URL)")
    client = connect(redis_url, client_name="shelly-cli")
    try:
        yield client, Keys(distributed.key_prefix)
    finally:
        await client.aclose()
