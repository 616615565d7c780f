"""A worker keeps per-session objects for a bounded number of sessions (a distributed batch makes
a session per item), with the defaults and with the environment's limits."""

from __future__ import annotations

from pathlib import Path

import pytest

from shelly_dist.engine import Engine, config_from_data
from shelly_dist.engine.config_runtime import runtime_settings
from shelly_dist.engine.worker import SESSION_CACHE_SIZE, EngineContext, session_cache_limits
from shelly_dist.errors import ConfigError
from shelly_dist.runtime import LocalRuntime

REDIS = "redis://127.0.0.1:6379/0"  # handles are built without connecting: no Redis needed


async def worker_context(tmp_path: Path) -> EngineContext:
    config = config_from_data({
        "providers": [{"name": "p", "kind": "scripted", "model": "m", "script": {"*": ["hi"]}}],
        "agents": [{"name": "a", "toolboxes": ["state", "tasks"]}],
        "distributed": {"broker_url": REDIS, "redis_url": REDIS},
    }, {})
    engine = await Engine.open(config, shelly_dir=tmp_path / ".shelly", runtime=LocalRuntime())
    return EngineContext(engine, "fp", runtime_settings(config))


async def test_a_worker_that_saw_many_sessions_holds_at_most_the_default_number(tmp_path: Path) -> None:
    ctx = await worker_context(tmp_path)
    try:
        for i in range(SESSION_CACHE_SIZE + 300):
            (await ctx.registry(f"session-{i}")).spawn("a")  # the agent's toolboxes open the session's boards
        sizes = ctx.engine.cached_sessions()
        assert sizes == {"registries": SESSION_CACHE_SIZE, "stores": SESSION_CACHE_SIZE, "boards": SESSION_CACHE_SIZE}
    finally:
        await ctx.aclose()


async def test_an_evicted_session_is_rebuilt_on_its_next_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHELLY_WORKER_SESSIONS", "1")
    ctx = await worker_context(tmp_path)
    try:
        first = await ctx.registry("one")
        await ctx.registry("two")
        again = await ctx.registry("one")
        assert again is not first and again.spawn("a").name
    finally:
        await ctx.aclose()


def test_bad_session_limits_name_the_variable() -> None:
    with pytest.raises(ConfigError, match="SHELLY_WORKER_SESSIONS"):
        session_cache_limits({"SHELLY_WORKER_SESSIONS": "lots"})
