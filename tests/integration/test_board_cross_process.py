"""The blackboard and task board across processes, on the real Redis.

Peers are real subprocesses (``board_peer.py``) that use 60 s poll intervals, so each test can only
pass through pub/sub wake-ups; the test process waits for peers to subscribe by watching
``PUBSUB NUMSUB`` with a deadline, never by sleeping.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from shelly_dist.errors import StoreError
from shelly_dist.redisio.connection import connect
from shelly_dist.redisio.keys import Keys
from shelly_dist.state.redis import RedisStore
from shelly_dist.tasks.redis import RedisBoard
from tests.conftest import free_port

pytestmark = pytest.mark.integration

PEER = Path(__file__).with_name("board_peer.py")
ROOT = PEER.parents[2]
SESSION = "xproc"


@asynccontextmanager
async def peers(redis_url: str, prefix: str, *commands: list[str]) -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """Start one peer per command; kill and reap every one of them on the way out."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs: list[asyncio.subprocess.Process] = []
    try:
        for command in commands:
            procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    str(PEER),
                    redis_url,
                    prefix,
                    SESSION,
                    *command,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    cwd=ROOT,
                    env=env,
                )
            )
        yield procs
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()


async def outcome(proc: asyncio.subprocess.Process, within: float = 60) -> str:
    out, err = await asyncio.wait_for(proc.communicate(), within)
    assert proc.returncode == 0, err.decode()
    return out.decode().strip()


async def until(check: Callable[[], Awaitable[bool]], what: str, within: float = 30) -> None:
    """Wait until ``check()`` is true, failing with ``what`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def subscribers(client: aioredis.Redis, channel: str) -> int:
    return int(dict(await client.pubsub_numsub(channel))[channel])


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    c = connect(redis_url)
    yield c
    await c.aclose()


async def test_a_watcher_in_another_process_is_woken_by_a_set(
    redis_url: str, key_prefix: str, client: aioredis.Redis
) -> None:
    keys = Keys(key_prefix)
    store = RedisStore(client, keys, session=SESSION)
    async with peers(redis_url, key_prefix, ["watch", "answer"]) as (proc,):
        await until(lambda: _has_subscribers(client, keys.state_changed(SESSION), 1), "the watcher")
        await store.set("answer", 42)
        assert await outcome(proc) == "42"


async def _has_subscribers(client: aioredis.Redis, channel: str, n: int) -> bool:
    return await subscribers(client, channel) >= n


async def test_a_thousand_set_watch_cycles_lose_no_wake_up(
    redis_url: str, key_prefix: str, client: aioredis.Redis
) -> None:
    store = RedisStore(client, Keys(key_prefix), session=SESSION, poll_interval=60)
    async with peers(redis_url, key_prefix, ["pingpong", "1000"]) as (proc,):
        for i in range(1000):
            assert (await store.watch(f"a{i}", timeout=10)).value == i
            await store.set(f"b{i}", i)
        assert await outcome(proc) == "done"


async def test_ten_processes_claiming_one_task_have_exactly_one_winner(
    redis_url: str, key_prefix: str, client: aioredis.Redis
) -> None:
    keys = Keys(key_prefix)
    store = RedisStore(client, keys, session=SESSION)
    task = await RedisBoard(client, keys, session=SESSION).create("contested")
    commands = [["claim", task.id, f"agent-{i}", "go"] for i in range(10)]
    async with peers(redis_url, key_prefix, *commands) as procs:
        await until(lambda: _has_subscribers(client, keys.state_changed(SESSION), 10), "10 claimers")
        await store.set("go", True)
        results = [await outcome(p) for p in procs]
    assert results.count("won") == 1, results
    losers = [r for r in results if r != "won"]
    assert len(losers) == 9 and all("already assigned" in r for r in losers), results


async def test_a_cancel_from_another_process_ends_the_watchers_wait(
    redis_url: str, key_prefix: str, client: aioredis.Redis
) -> None:
    keys = Keys(key_prefix)
    board = RedisBoard(client, keys, session=SESSION)
    task = await board.create("to cancel")
    await board.claim(task.id, "worker")
    async with peers(redis_url, key_prefix, ["watch-cancel", task.id]) as (proc,):
        await until(lambda: _has_subscribers(client, keys.tasks_changed(SESSION), 2), "both watchers")
        await board.cancel(task.id)
        assert await outcome(proc) == "canceled canceled"


async def test_a_killed_connection_under_a_watch_resumes_the_watch(
    redis_url: str, key_prefix: str, client: aioredis.Redis
) -> None:
    name = f"shelly-test-{uuid.uuid4().hex[:8]}"
    keys = Keys(key_prefix)
    watched = connect(redis_url, client_name=name)
    try:
        watcher_store = RedisStore(watched, keys, session=SESSION, poll_interval=60)
        watcher = asyncio.create_task(watcher_store.watch("k", timeout=30))
        await until(lambda: _has_subscribers(client, keys.state_changed(SESSION), 1), "the watcher")
        killed = 0
        for info in await client.client_list():
            if info.get("name") == name:
                killed += await client.client_kill_filter(_id=info["id"])
        assert killed >= 1
        await RedisStore(client, keys, session=SESSION).set("k", "after the kill")
        assert (await asyncio.wait_for(watcher, 30)).value == "after the kill"
    finally:
        await watched.aclose()


async def test_a_watch_with_no_redis_fails_with_a_clear_error() -> None:
    dead = connect(f"redis://127.0.0.1:{free_port()}/0")
    try:
        with pytest.raises(StoreError, match=r"watch: cannot subscribe to .*:state:changed: .*connecting"):
            await asyncio.wait_for(RedisStore(dead, session=SESSION).watch("k", timeout=5), 60)
    finally:
        await dead.aclose()
