"""A finished root on the pool waits for the runs of its tree still ending (``tree_end``), and
only for a bounded time."""

from __future__ import annotations

import asyncio
import logging

import fakeredis
import pytest

from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.client.tree_end import until_tree_ended

KEYS = Keys("t:")


class Ticks:
    """A watch whose generation moves on every wait (a poll tick)."""

    def __init__(self) -> None:
        self.generation = 0
        self.subscribed = 0

    async def __call__(self) -> Ticks:
        self.subscribed += 1
        return self

    async def moved(self, since: int) -> None:
        await asyncio.sleep(0.01)
        self.generation = since + 1


async def tree(client: fakeredis.FakeAsyncRedis, **statuses: str) -> None:
    await client.sadd(KEYS.tree_runs("root"), "root", *statuses)
    for run_id, status in statuses.items():
        await client.hset(KEYS.run(run_id), "status", status)


async def test_a_tree_whose_runs_all_ended_returns_at_once_without_subscribing() -> None:
    client = fakeredis.FakeAsyncRedis(decode_responses=True)
    await tree(client, a="done", b="canceled")
    ticks = Ticks()
    await until_tree_ended(client, KEYS, "root", ticks)
    assert ticks.subscribed == 0


async def test_it_returns_once_the_stopped_child_has_ended() -> None:
    client = fakeredis.FakeAsyncRedis(decode_responses=True)
    await tree(client, a="done", b="waiting")
    ticks = Ticks()
    waiting = asyncio.create_task(until_tree_ended(client, KEYS, "root", ticks))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    await client.hset(KEYS.run("b"), "status", "canceled")
    await asyncio.wait_for(waiting, 5)


async def test_a_child_that_never_ends_costs_at_most_the_limit_and_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    client = fakeredis.FakeAsyncRedis(decode_responses=True)
    await tree(client, b="waiting")
    with caplog.at_level(logging.WARNING):
        await asyncio.wait_for(until_tree_ended(client, KEYS, "root", Ticks(), limit=0.1), 5)
    assert "run root ended with 1 runs of its tree still ending: b" in caplog.text
