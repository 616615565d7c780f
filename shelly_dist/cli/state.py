"""``shelly state get|set|list|delete|watch``: a session's blackboard, from outside the run."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import click

from shelly_dist.cli.backend import echo_json, parse_value, shared_stores
from shelly_dist.cli.errors import run_async
from shelly_dist.cli.options import session_scoped
from shelly_dist.errors import StoreError
from shelly_dist.state import Store


def _with_store(config_path: str | None, shelly_dir: str, session: str, op: Callable[[Store], Awaitable[Any]]) -> None:
    async def main() -> Any:
        async with shared_stores(config_path, shelly_dir, "state") as stores:
            return await op(stores.store(session))

    echo_json(run_async(main()))


@click.group("state")
def state_group() -> None:
    """Read and write a session's blackboard (needs the Redis backend)."""


@state_group.command("get")
@click.argument("key")
@session_scoped
def get(key: str, session_id: str, config_path: str | None, shelly_dir: str) -> None:
    """Print the entry at KEY as JSON (exit 1 when missing)."""

    async def op(store: Store) -> Any:
        entry = await store.get(key)
        if entry is None:
            raise StoreError(f"state: key {key!r} not found in session {session_id}", key=key)
        return {"key": key, **entry.model_dump(mode="json")}

    _with_store(config_path, shelly_dir, session_id, op)


@state_group.command("set")
@click.argument("key")
@click.argument("value")
@session_scoped
def set_(key: str, value: str, session_id: str, config_path: str | None, shelly_dir: str) -> None:
    """Set KEY to VALUE (parsed as JSON when it is JSON, else a string)."""

    async def op(store: Store) -> Any:
        return {"key": key, **(await store.set(key, parse_value(value))).model_dump(mode="json")}

    _with_store(config_path, shelly_dir, session_id, op)


@state_group.command("list")
@session_scoped
def list_(session_id: str, config_path: str | None, shelly_dir: str) -> None:
    """Print every key and value as one JSON object."""

    async def op(store: Store) -> Any:
        return await store.snapshot()

    _with_store(config_path, shelly_dir, session_id, op)


@state_group.command("delete")
@click.argument("key")
@session_scoped
def delete(key: str, session_id: str, config_path: str | None, shelly_dir: str) -> None:
    """Delete KEY; prints {"deleted": true|false}."""

    async def op(store: Store) -> Any:
        return {"key": key, "deleted": await store.delete(key)}

    _with_store(config_path, shelly_dir, session_id, op)


@state_group.command("watch")
@click.argument("key")
@click.option("--timeout", type=float, default=None, help="Seconds to wait (default: forever).")
@session_scoped
def watch(key: str, timeout: float | None, session_id: str, config_path: str | None, shelly_dir: str) -> None:
    """Wait until KEY exists, then print its entry."""

    async def op(store: Store) -> Any:
        return {"key": key, **(await store.watch(key, timeout)).model_dump(mode="json")}

    _with_store(config_path, shelly_dir, session_id, op)
