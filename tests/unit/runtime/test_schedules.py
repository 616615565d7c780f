"""The schedule ticker: each due time fires once however many tickers share the index."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from shelly_dist.runtime.schedules import Scheduler
from shelly_dist.workspace import MemoryWorkspace, Workspace
from shelly_dist.workspace.due import DueIndex, MemoryDueIndex, member, wake_member
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


class Resent:
    """Records the wakes a ticker sends again (``PoolWakes.wake`` on a worker)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int, str]] = []

    async def __call__(self, session: str, agent: str, attempt: int, error: str) -> None:
        self.calls.append((session, agent, attempt, error))


async def test_a_due_wake_check_of_a_waiting_inbox_with_a_free_lease_sends_the_wake_once(
    due: DueIndex, ws: Workspace,
) -> None:
    """The wake's send was refused or lost: one of two tickers sends it again."""
    await ws.send("user", "@ticker hi")
    await due.hint(wake_member("s1", "ticker"), 100.0)
    resent = Resent()
    tickers = [Scheduler(due, lambda _s: ws, resend=resent), Scheduler(due, lambda _s: ws, resend=resent)]
    assert sum([await t.tick(now=100.5) for t in tickers]) == 1
    assert resent.calls == [("s1", "ticker", 1, "")]
    assert [e for e, _ in await due.due(106.0)] == [wake_member("s1", "ticker")]  # checked again later


async def test_a_wake_check_waits_while_a_wake_holds_the_agents_lease(due: DueIndex, ws: Workspace) -> None:
    await ws.send("user", "@ticker hi")
    assert await ws.acquire_wake("ticker", "running-wake", 30.0)
    await due.hint(wake_member("s1", "ticker"), 100.0)
    resent = Resent()
    assert await Scheduler(due, lambda _s: ws, resend=resent).tick(now=100.5) == 0
    assert resent.calls == [] and await due.due(125.0) == []


async def test_a_wake_check_of_an_empty_inbox_is_dropped(due: DueIndex, ws: Workspace) -> None:
    await due.hint(wake_member("s1", "ticker"), 100.0)
    resent = Resent()
    assert await Scheduler(due, lambda _s: ws, resend=resent).tick(now=100.5) == 0
    assert resent.calls == [] and await due.due(10**10) == []


async def test_a_wake_sent_again_carries_on_its_pending_retrys_attempt(due: DueIndex, ws: Workspace) -> None:
    """A lost retry does not restart the count: the messages still dead-letter after 3 attempts."""
    await ws.send("user", "@ticker hi")
    await ws.set_retry("ticker", 3, "model down")
    await due.hint(wake_member("s1", "ticker"), 100.0)
    resent = Resent()
    await Scheduler(due, lambda _s: ws, resend=resent).tick(now=100.5)
    assert resent.calls == [("s1", "ticker", 3, "model down")]


async def test_a_hint_only_brings_a_wake_check_forward(due: DueIndex) -> None:
    await due.hint(wake_member("s1", "ticker"), 100.0)
    await due.hint(wake_member("s1", "ticker"), 500.0)
    assert [e for e, _ in await due.due(100.0)] == [wake_member("s1", "ticker")]


class SwallowingDueIndex(MemoryDueIndex):
    """A due index whose read answers when cancelled, as a redis-py command can on Python 3.11
    (its ``asyncio.wait_for`` returns the result when the cancel lands as the send ends)."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = asyncio.Event()

    async def due(self, now: float, limit: int = 100) -> list[tuple[str, int]]:
        self.reading.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.get_running_loop().create_future()  # answered only by a cancellation
        return []


async def test_a_ticker_whose_redis_read_swallowed_the_cancellation_still_closes(ws: Workspace) -> None:
    due = SwallowingDueIndex()
    ticker = Scheduler(due, lambda _s: ws)
    ticker.start()
    await due.reading.wait()
    closing = asyncio.ensure_future(ticker.aclose())
    done, _ = await asyncio.wait({closing}, timeout=5)
    assert closing in done, "aclose hung: the ticker kept ticking after its cancellation"
