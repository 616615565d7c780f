"""The ``store`` fixture: one blackboard per backend, for the contract suite."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from shelly_dist.state import MemoryStore, Store
from tests.unit.state.backends import BACKENDS, POLL, redis_backend


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
        return
    from shelly_dist.state.redis import RedisStore

    async with redis_backend(request, request.param) as (client, keys):
        yield RedisStore(client, keys, session="s1", retention=600, poll_interval=POLL)
