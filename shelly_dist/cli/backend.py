"""The shared backend ``shelly state`` and ``shelly tasks`` talk to: the configured Redis.

These commands inspect a session from *outside* the process that runs it, so an in-memory store
would always be empty: without ``distributed.redis_url`` (or a Redis ``broker_url``, or
``SHELLY_REDIS_URL``) they refuse with exit 2 instead of showing nothing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import click

from shelly_dist.engine import find_config, load_config
from shelly_dist.engine.stores import SessionStores
from shelly_dist.errors import UsageError


@asynccontextmanager
async def shared_stores(config_path: str | None, shelly_dir: str, command: str) -> AsyncIterator[SessionStores]:
    """The Redis-backed stores of the config; a ``UsageError`` when none is configured."""
    cfg = load_config(find_config(config_path, shelly_dir))
    stores = SessionStores.from_config(cfg.distributed)
    if not stores.shared:
        raise UsageError(
            f"{command}: a shared backend is needed: set distributed.redis_url in the config "
            "(or a Redis distributed.broker_url, or SHELLY_REDIS_URL)"
        )
    try:
        yield stores
    finally:
        await stores.aclose()


def echo_json(value: Any) -> None:
    """One JSON document on stdout."""
    click.echo(json.dumps(value, ensure_ascii=False, sort_keys=True))


def parse_value(text: str) -> Any:
    """``text`` as JSON when it parses, else the string itself (``set k hello`` stores "hello")."""
    try:
        return json.loads(text)
    except ValueError:
        return text
