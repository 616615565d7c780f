"""The schedule ticker: each due time fires once however many tickers share the index."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from shelly_dist.runtime.schedules import Scheduler
from shelly_dist.workspace import MemoryWorkspace, Workspace
from shelly_dist.workspace.due import DueIndex, MemoryDueIndex, member
from shelly_dist.workspace.schedule import parse_wakeup
from tests.unit.state.backends import redis_backend


@pytest.fixture(params=["memory", "fakeredis"])
async def due(request: pytest.FixtureRequest) -> AsyncIterator[DueIndex]:
    if request.param == "memory":
        yield MemoryDueIndex()
        return
    from shelly_dist.workspace.redis import RedisDueIndex

    async with redis_backend(request, request.param) as (client, keys):
        yield RedisDueIndex(client, keys)


@pytest.fixture
async def ws() -> Workspace:
    workspace = MemoryWorkspace()
    await workspace.join(["ticker"])
    await workspace.set_schedule("ticker", parse_wakeup("10s", "Look around."))
    return workspace


async def test_two_tickers_fire_a_due_time_once(due: DueIndex, ws: Workspace) -> None:
    await due.schedule(member("s1", "ticker"), 100.0)
    tickers = [Scheduler(due, lambda _s: ws), Scheduler(due, lambda _s: ws)]
    fired = [await t.tick(now=105.0) for t in tickers]
    assert sum(fired) == 1
    [post] = await ws.read(None)
    assert (post.sender, post.content, post.mentions) == ("system", "@ticker Look around.", ["ticker"])
    assert [await t.tick(now=110.0) for t in tickers] == [0, 0]  # next due at 115
    assert sum([await t.tick(now=115.5) for t in tickers]) == 1


async def test_activity_restarts_an_interval_schedules_clock(due: DueIndex, ws: Workspace) -> None:
    await due.schedule(member("s1", "ticker"), 100.0)
    last = (await ws.status_set("ticker", "idle")).updated_at  # a wake just ended
    ticker = Scheduler(due, lambda _s: ws)
    assert await ticker.tick(now=last + 5) == 0
    assert await due.due(last + 9.9) == []
    assert [e for e, _ in await due.due(last + 10.1)] == [member("s1", "ticker")]


async def test_a_stopped_sessions_schedule_is_dropped(due: DueIndex, ws: Workspace) -> None:
    await due.schedule(member("s1", "ticker"), 100.0)
    await ws.request_stop()
    assert await Scheduler(due, lambda _s: ws).tick(now=200.0) == 0
    assert await due.due(10**10) == []
