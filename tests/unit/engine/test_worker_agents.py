"""A worker reads a session's workflow agents (the workspace meta field ``agents``) with an async
client, once per session it caches: the read never blocks the worker's loop (issue 27), and a
Redis failure is a ``StoreError`` naming the session."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError

from shelly_dist.engine import Engine, config_from_data
from shelly_dist.engine.config_runtime import runtime_settings
from shelly_dist.engine.worker import EngineContext
from shelly_dist.errors import StoreError
from shelly_dist.runtime import LocalRuntime

REDIS = "redis://127.0.0.1:6379/0"  # never reached: the engine's client is replaced below
SPEC = json.dumps({"helper": {"system_prompt": "You help."}})


class MetaClient:
    """The engine's async Redis client as far as the agents read goes: ``hmget`` of the meta hash
    (the agents and the workflow file), answered only once the test lets it (so a read that
    blocked the loop could never end)."""

    def __init__(self, agents: str | None, *, error: Exception | None = None) -> None:
        self.agents = agents
        self.error = error
        self.reads: list[tuple[str, tuple[str, ...]]] = []
        self.asked = asyncio.Event()
        self.answer = asyncio.Event()

    async def hmget(self, key: str, fields: list[str]) -> list[str | None]:
        self.reads.append((key, tuple(fields)))
        self.asked.set()
        await self.answer.wait()
        if self.error is not None:
            raise self.error
        return [self.agents if field == "agents" else None for field in fields]

    async def aclose(self) -> None:
        return None


def refuse_sync_redis(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a synchronous Redis command on the worker's loop")


@contextlib.asynccontextmanager
async def worker_context(tmp_path: Path, client: MetaClient, monkeypatch: pytest.MonkeyPatch
                         ) -> AsyncIterator[EngineContext]:
    """A worker's engine context whose Redis reads go to ``client``; a synchronous command fails."""
    config = config_from_data({
        "providers": [{"name": "p", "kind": "scripted", "model": "m", "script": {"*": ["hi"]}}],
        "agents": [{"name": "a"}],
        "distributed": {"broker_url": REDIS, "redis_url": REDIS},
    }, {})
    engine = await Engine.open(config, shelly_dir=tmp_path / ".shelly", runtime=LocalRuntime())
    monkeypatch.setattr(engine.stores, "client", lambda: client)
    monkeypatch.setattr(redis.Redis, "execute_command", refuse_sync_redis)
    ctx = EngineContext(engine, "fp", runtime_settings(config))
    try:
        yield ctx
    finally:
        await ctx.aclose()


async def registry_once_answered(ctx: EngineContext, client: MetaClient, session: str) -> Any:
    """The registry of ``session``, letting the read answer only from another task of the loop."""
    pending = asyncio.create_task(ctx.registry(session))
    asked = asyncio.create_task(client.asked.wait())
    done, _ = await asyncio.wait({pending, asked}, timeout=5.0, return_when=asyncio.FIRST_COMPLETED)
    asked.cancel()
    # the registry is waiting on its read, and this task runs: the loop is free meanwhile
    assert asked in done and pending not in done, "the registry never read the agents"
    client.answer.set()
    return await asyncio.wait_for(pending, 5.0)


async def test_a_workers_registry_reads_the_workflow_agents_without_blocking_its_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = MetaClient(SPEC)
    async with worker_context(tmp_path, client, monkeypatch) as ctx:
        registry = await registry_once_answered(ctx, client, "s1")
        assert registry.get("helper") is not None and registry.get("a") is not None
        assert client.reads == [(ctx.engine.stores.keys.workspace("s1", "meta"), ("agents", "workflow_file"))]


async def test_a_session_without_workflow_agents_gets_the_configs_agents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = MetaClient(None)
    async with worker_context(tmp_path, client, monkeypatch) as ctx:
        registry = await registry_once_answered(ctx, client, "s1")
        assert [e.name for e in registry.list()] == ["a"]


async def test_a_worker_reads_a_sessions_workflow_agents_once_while_it_caches_the_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = MetaClient(SPEC)
    async with worker_context(tmp_path, client, monkeypatch) as ctx:
        first = await registry_once_answered(ctx, client, "s1")
        assert await ctx.registry("s1") is first
        assert len(client.reads) == 1


async def test_a_redis_failure_reading_the_workflow_agents_is_a_store_error_naming_the_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = MetaClient(SPEC, error=RedisConnectionError("connection refused"))
    async with worker_context(tmp_path, client, monkeypatch) as ctx:
        with pytest.raises(StoreError, match="worker: cannot read the workflow agents of session s1: connection"):
            await registry_once_answered(ctx, client, "s1")


async def test_a_workers_synchronous_registry_gives_only_a_session_already_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = MetaClient(SPEC)
    async with worker_context(tmp_path, client, monkeypatch) as ctx:
        with pytest.raises(RuntimeError, match="registry_async"):
            ctx.engine.registry("s1")  # built here, it would lack the session's workflow agents
        read = await registry_once_answered(ctx, client, "s1")
        assert ctx.engine.registry("s1") is read
