"""A process's wait for many root runs' ends (``client.roots``): what a message on a root's
``ended`` channel names is read (the roots named since the last read in one pipelined read); poll
ticks read nothing; an outage and a long backstop read every root's status (real Redis)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from shelly_dist.errors import RunError, StoreError
from shelly_dist.redisio.connection import connect
from shelly_dist.redisio.hub import Hub
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.client.roots import RootWaiter

pytestmark = pytest.mark.integration


class Counted(RootWaiter):
    """Counts its pipelined reads (one round trip each)."""

    reads = 0
    read: set[str]

    async def _pipelined(self, roots: list[str], *, status: bool) -> list[object]:
        self.reads += 1
        if not status:
            self.read = getattr(self, "read", set()) | set(roots)
        return await super()._pipelined(roots, status=status)


@contextlib.asynccontextmanager
async def waiter(redis_url: str, prefix: str, *, poll: float = 0.05, backstop: float = 30.0
                 ) -> AsyncIterator[tuple[aioredis.Redis, Keys, Hub, Counted]]:
    client = connect(redis_url)
    hub = Hub(client, poll, tree=True)
    roots = Counted(client, Keys(prefix), lambda: hub, backstop=backstop)
    try:
        yield client, Keys(prefix), hub, roots
    finally:
        await roots.aclose()
        await hub.aclose()
        await client.aclose()


async def until(condition: Callable[[], bool], within: float = 10.0) -> None:
    """Return once ``condition()`` holds (looked at every 20 ms), failing after ``within`` s."""
    async with asyncio.timeout(within):
        for _ in itertools.count():
            if condition():
                return
            await asyncio.sleep(0.02)


async def record(client: aioredis.Redis, keys: Keys, run_id: str, status: str) -> None:
    await client.hset(keys.run(run_id), mapping={"id": run_id, "agent": "a", "root": run_id, "status": status})


async def finish(client: aioredis.Redis, keys: Keys, run_id: str) -> None:
    await record(client, keys, run_id, "done")
    await client.publish(keys.run_ended(run_id), "done")


async def test_a_root_that_ended_before_its_wait_began_is_read_at_once(redis_url: str, key_prefix: str) -> None:
    async with waiter(redis_url, key_prefix) as (client, keys, _, roots):
        await record(client, keys, "r1", "done")
        assert (await asyncio.wait_for(roots.wait("r1"), 10)).status == "done"


async def test_a_missing_root_is_an_error_naming_it(redis_url: str, key_prefix: str) -> None:
    async with waiter(redis_url, key_prefix) as (_, _, _, roots):
        with pytest.raises(RunError, match="run nope: not found"):
            await asyncio.wait_for(roots.wait("nope"), 10)


async def test_many_waiting_roots_cost_no_read_per_poll_tick_and_at_most_one_read_per_end(
    redis_url: str, key_prefix: str
) -> None:
    async with waiter(redis_url, key_prefix, poll=0.05) as (client, keys, _, roots):
        ids = [f"r{i}" for i in range(200)]
        for rid in ids:
            await record(client, keys, rid, "running")
        waits = [asyncio.create_task(roots.wait(rid)) for rid in ids]
        await until(lambda: len(getattr(roots, "read", ())) == 200)  # every wait subscribed, read once
        await asyncio.sleep(0.2)  # the last of those reads answered
        settled = roots.reads
        await asyncio.sleep(1.0)  # twenty poll ticks of the hub
        assert roots.reads == settled
        for rid in ids[:50]:
            await finish(client, keys, rid)
        done = await asyncio.wait_for(asyncio.gather(*waits[:50]), 10)
        assert all(r.status == "done" for r in done) and not any(w.done() for w in waits[50:])
        assert roots.reads - settled <= 50  # at most one read per end: the cost follows what ends
        for w in waits[50:]:
            w.cancel()
        await asyncio.gather(*waits[50:], return_exceptions=True)


async def test_an_end_whose_message_was_lost_is_found_by_the_backstop(redis_url: str, key_prefix: str) -> None:
    async with waiter(redis_url, key_prefix, backstop=0.5) as (client, keys, _, roots):
        await record(client, keys, "quiet", "running")
        wait = asyncio.create_task(roots.wait("quiet"))
        await asyncio.sleep(0.2)
        await record(client, keys, "quiet", "done")  # no message
        assert (await asyncio.wait_for(wait, 10)).status == "done"


async def test_an_outage_of_the_hub_makes_every_root_be_checked(redis_url: str, key_prefix: str) -> None:
    async with waiter(redis_url, key_prefix) as (client, keys, hub, roots):
        await record(client, keys, "r1", "running")
        wait = asyncio.create_task(roots.wait("r1"))
        await until(lambda: "r1" in getattr(roots, "read", ()))
        await asyncio.sleep(0.1)
        await record(client, keys, "r1", "done")  # its message lost with the connection
        hub.outages += 1
        hub._move_all()
        assert (await asyncio.wait_for(wait, 10)).status == "done"


async def test_a_wait_with_a_timeout_says_the_run_is_still_going(redis_url: str, key_prefix: str) -> None:
    async with waiter(redis_url, key_prefix) as (client, keys, _, roots):
        await record(client, keys, "slow", "running")
        with pytest.raises(RunError, match=r"run slow: still going after 0\.3s"):
            await roots.wait("slow", timeout=0.3)
        assert roots.waiting == 0


class FlakyHub:
    """The hub, whose first ``fails`` subscriptions meet Redis going away (as during a restart)."""

    def __init__(self, hub: Hub, fails: int) -> None:
        self.hub, self.fails = hub, fails

    async def watch(self, channel: str, on_move: Callable[[str | None], None] | None = None) -> object:
        if self.fails:
            self.fails -= 1
            cause = RedisConnectionError("Error while reading from 127.0.0.1:6379 : (104, 'Connection reset by peer')")
            raise StoreError(f"watch: cannot subscribe to {channel}: {cause}") from cause
        return await self.hub.watch(channel, on_move)

    def __getattr__(self, name: str) -> object:
        return getattr(self.hub, name)


async def test_a_wait_whose_subscription_meets_redis_restarting_waits_it_out(
        redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shelly_dist.redisio.blocking.backoff", lambda attempt: 0.01)
    async with waiter(redis_url, key_prefix) as (client, keys, hub, _):
        flaky = FlakyHub(hub, fails=2)
        roots = RootWaiter(client, keys, lambda: flaky)  # type: ignore[arg-type,return-value]
        try:
            await record(client, keys, "r1", "done")
            assert (await asyncio.wait_for(roots.wait("r1"), 10)).status == "done" and flaky.fails == 0
        finally:
            await roots.aclose()
