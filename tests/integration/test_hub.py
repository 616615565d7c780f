"""One pub/sub connection for many runs' wake-ups (``redisio.hub``): shared, per channel, and it
outlives a Redis restart (issue 16)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import redis.asyncio as aioredis

from shelly_dist.redisio.connection import connect
from shelly_dist.redisio.hub import Hub

from .support.redis_server import RedisServer

LONG_POLL = 30.0
"""A poll interval no test waits out: a watch that moves did so on a message."""


@contextlib.asynccontextmanager
async def _hub(url: str, poll: float, name: str | None = None) -> AsyncIterator[tuple[aioredis.Redis, Hub]]:
    client = connect(url, client_name=name)
    hub = Hub(client, poll)
    try:
        yield client, hub
    finally:
        await hub.aclose()
        await client.aclose()


async def _pubsub_connections(client: aioredis.Redis, name: str) -> int:
    clients = await client.client_list(_type="pubsub")
    return sum(1 for c in clients if c.get("name") == name)


async def test_watches_of_several_channels_share_one_pubsub_connection(redis_url: str):
    name = f"hub-test-{uuid.uuid4().hex[:8]}"
    async with _hub(redis_url, LONG_POLL, name) as (client, hub):
        watches = [await hub.watch(f"hub-test:{uuid.uuid4().hex}") for _ in range(5)]
        assert await _pubsub_connections(client, name) == 1
        for w in watches:
            await w.aclose()


async def test_a_publish_moves_the_watches_of_its_channel_only(redis_url: str):
    async with _hub(redis_url, LONG_POLL) as (client, hub):
        a = await hub.watch(f"hub-test:{uuid.uuid4().hex}")
        b = await hub.watch(f"hub-test:{uuid.uuid4().hex}")
        seen_a, seen_b = a.generation, b.generation
        await client.publish(a.channel, "joined")
        await asyncio.wait_for(a.moved(seen_a), 10)
        assert b.generation == seen_b


async def test_a_watch_moves_each_poll_interval_without_a_message(redis_url: str):
    async with _hub(redis_url, 0.2) as (_, hub):
        w = await hub.watch(f"hub-test:{uuid.uuid4().hex}")
        for _ in range(2):
            await asyncio.wait_for(w.moved(w.generation), 10)


async def test_after_a_redis_restart_the_hub_resubscribes_and_messages_arrive_again(tmp_path: Path):
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        async with _hub(server.url(), 0.5) as (client, hub):
            await _restart_and_deliver(server, client, hub)
    finally:
        server.stop()


async def _restart_and_deliver(server: RedisServer, client: aioredis.Redis, hub: Hub) -> None:
    """Kill Redis under a watch, see the watch move, restart it, and get a message through."""
    w = await hub.watch("hub-test:restart")
    server.kill()
    await asyncio.wait_for(w.moved(w.generation), 10)  # the owner is told to re-read
    server.start()

    async def delivered() -> None:
        while True:
            seen = w.generation
            if await client.publish(w.channel, "x"):  # a subscriber received it
                await w.moved(seen)
                return
            await asyncio.sleep(0.1)

    await asyncio.wait_for(delivered(), 30)


async def test_each_owner_of_a_watch_reads_every_message_since_its_position(redis_url: str):
    async with _hub(redis_url, LONG_POLL) as (client, hub):
        w = await hub.watch(f"hub-test:{uuid.uuid4().hex}")
        first = w.position
        await client.publish(w.channel, "child|a")
        await client.publish(w.channel, "child|b")
        while w.generation < 2:
            await asyncio.wait_for(w.moved(w.generation), 10)
        assert w.hints_since(first) == (["child|a", "child|b"], first + 2)
        assert w.hints_since(first + 1) == (["child|b"], first + 2)  # another owner, one read behind


async def test_a_poll_tick_is_a_hint_that_anything_may_have_changed(redis_url: str):
    async with _hub(redis_url, 0.2) as (_, hub):
        w = await hub.watch(f"hub-test:{uuid.uuid4().hex}")
        first, seen = w.position, w.generation
        await asyncio.wait_for(w.moved(seen), 10)
        hints, _ = w.hints_since(first)
        assert hints and all(h is None for h in hints)


async def test_hundreds_of_watches_opened_at_once_share_one_connection_of_a_small_pool(redis_url: str):
    """redis-py's pub/sub takes its connection on its first command; several first commands at
    once each took one, and a bounded pool (the coordinator's) ran dry: watches failed."""
    name = f"hub-test-{uuid.uuid4().hex[:8]}"
    client = connect(redis_url, client_name=name, max_connections=4)
    hub = Hub(client, LONG_POLL)
    try:
        watches = await asyncio.gather(*(hub.watch(f"{name}:c{i}") for i in range(300)))
        assert len(watches) == 300
        assert await _pubsub_connections(client, name) == 1
    finally:
        await hub.aclose()
        await client.aclose()
