"""The index of sessions with runs, as the console's pool backend lists it (real Redis, no
workers): every root a session starts puts it first, pages follow a cursor, a bad one is refused."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from shelly_dist.console.pool import PoolBackend
from shelly_dist.engine.config import fingerprint
from shelly_dist.engine.config_runtime import runtime_settings
from shelly_dist.errors import UsageError
from shelly_dist.runtime.celery import open_runtime
from tests.unit.console.conftest import team_config


@pytest.fixture
async def pool(redis_url: str, key_prefix: str) -> AsyncIterator[PoolBackend]:
    base = team_config()
    config = base.model_copy(update={"distributed": base.distributed.model_copy(
        update={"broker_url": redis_url, "redis_url": redis_url, "key_prefix": key_prefix})})
    backend = PoolBackend(config, open_runtime(runtime_settings(config), fingerprint(config)))
    try:
        yield backend
    finally:
        await backend.aclose()


async def root(pool: PoolBackend, session: str, run_id: str, task: str) -> None:
    await pool.runtime.journal.create_root(run_id, agent="lead", session=session, mode="worker", task=task,
                                          fingerprint="f")


async def test_sessions_are_listed_newest_root_first_page_by_page(pool: PoolBackend) -> None:
    await root(pool, "s1", "r1", "first")
    await root(pool, "s2", "r2", "second")
    await root(pool, "s3", "r3", "third")
    await root(pool, "s1", "r4", "first again")  # a second root moves its session to the top
    first = await pool.sessions(limit=2, cursor=None)
    assert [s.id for s in first.sessions] == ["s1", "s3"] and first.next is not None
    assert [r.id for r in first.sessions[0].roots] == ["r1", "r4"] and first.sessions[0].status == "queued"
    rest = await pool.sessions(limit=2, cursor=first.next)
    assert [s.id for s in rest.sessions] == ["s2"] and rest.next is None
    with pytest.raises(UsageError, match="cursor"):
        await pool.sessions(limit=2, cursor="tomorrow")


async def test_the_index_keeps_a_ttl(pool: PoolBackend) -> None:
    await root(pool, "s1", "r1", "first")
    assert 0 < await pool.client.ttl(pool.keys.run_sessions()) <= pool.runtime.settings.retention
