"""What the operations commands (``events``, ``runs``, ``cancel``, ``flower``) share: the
distributed settings of the config, and a Redis client for them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from shelly_dist.engine.config import find_config, load_config

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from shelly_dist.runtime.celery import RuntimeSettings
    from shelly_dist.state.keys import Keys


def load_settings(config_path: str | None, shelly_dir: str) -> RuntimeSettings:
    """The ``distributed:`` settings; a ``ConfigError`` (exit 2) when no broker is configured."""
    from shelly_dist.engine.config_runtime import runtime_settings

    return runtime_settings(load_config(find_config(config_path, shelly_dir)))


@asynccontextmanager
async def redis_for(config_path: str | None, shelly_dir: str) -> AsyncIterator[tuple[aioredis.Redis, Keys]]:
    from shelly_dist.state.connection import connect
    from shelly_dist.state.keys import Keys

    settings = load_settings(config_path, shelly_dir)
    client = connect(settings.redis_url, client_name="shelly-cli")
    try:
        yield client, Keys(settings.key_prefix)
    finally:
        await client.aclose()
