"""The ``board`` fixture: one task board per backend, for the contract suite.

The unclaimed timeout is 200 ms (Shelly's tests shorten it the same way).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from shelly_dist.tasks import Board, MemoryBoard
from tests.unit.state.backends import BACKENDS, POLL, redis_backend

UNCLAIMED = 0.2


@pytest.fixture(params=BACKENDS)
async def board(request: pytest.FixtureRequest) -> AsyncIterator[Board]:
    if request.param == "memory":
        yield MemoryBoard(unclaimed_timeout=UNCLAIMED)
        return
    from shelly_dist.tasks.redis import RedisBoard

    async with redis_backend(request, request.param) as (client, keys):
        yield RedisBoard(client, keys, session="s1", retention=600, poll_interval=POLL, unclaimed_timeout=UNCLAIMED)
