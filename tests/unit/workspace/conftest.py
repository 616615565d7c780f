"""The ``ws`` fixture: one team workspace per backend (memory, fakeredis, real Redis), whose team
is reviewer, coder and tester."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from shelly_dist.workspace import MemoryWorkspace, Workspace
from tests.unit.state.backends import BACKENDS, redis_backend

TEAM = ["coder", "reviewer", "tester"]


@pytest.fixture(params=BACKENDS)
async def ws(request: pytest.FixtureRequest) -> AsyncIterator[Workspace]:
    if request.param == "memory":
        workspace: Workspace = MemoryWorkspace()
        await workspace.join(TEAM)
        yield workspace
        return
    from shelly_dist.workspace.redis import RedisWorkspace

    async with redis_backend(request, request.param) as (client, keys):
        workspace = RedisWorkspace(client, keys, session="s1", retention=600)
        await workspace.join(TEAM)
        yield workspace
