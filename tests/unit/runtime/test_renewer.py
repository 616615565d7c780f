"""The process's lease renewer on fakeredis (Lua): one round trip renews every lease, a blocked
event loop keeps its leases, a hung one lets them lapse."""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import fakeredis
import pytest
from redis.exceptions import RedisClusterException

from shelly_dist.runtime.celery.journal import Journal, Lease
from shelly_dist.runtime.celery.journal.renewer import Renewer
from shelly_dist.runtime.celery.journal.renewer import logger as renewer_logger
from shelly_dist.runtime.celery.settings import RuntimeSettings


class Counting(fakeredis.FakeRedis):
    """A synchronous fake client that remembers the name of every command it sends."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: list[str] = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent.append(str(args[0]).upper())
        return super().execute_command(*args, **options)


class World:
    """A journal on a fake server, and a sync view of that server for the test's own reads."""

    def __init__(self, lease: float) -> None:
        self.server = fakeredis.FakeServer()
        self.settings = RuntimeSettings(broker_url="redis://", redis_url="redis://", lease=lease,
                                        key_prefix=f"t:{uuid.uuid4().hex[:6]}:")
        self.journal = Journal(fakeredis.FakeAsyncRedis(server=self.server, decode_responses=True), self.settings)
        self.redis = fakeredis.FakeRedis(server=self.server, decode_responses=True)
        self.renewers: list[Renewer] = []

    def renewer(self, *, clustered: bool = False, hang_limit: float | None = None) -> tuple[Renewer, Counting]:
        client = Counting(server=self.server, decode_responses=True)
        renewer = Renewer(self.settings, self.journal.keys, clustered=clustered, connect=lambda: client,
                          hang_limit=hang_limit)
        self.renewers.append(renewer)
        return renewer, client

    async def lease(self, run_id: str, root: str | None = None) -> Lease:
        """A claimed run: a root of its own tree, or a child of ``root``."""
        if root is None:
            await self.journal.create_root(run_id, agent="w", session="s", mode="worker", task="t", fingerprint="fp")
        else:
            await self.journal.client.hset(self.journal.keys.run(run_id),
                                           mapping={"id": run_id, "root": root, "status": "queued", "agent": "w"})
        claim = await self.journal.claim(run_id, root or run_id, f"tok-{run_id}", "w1")
        assert claim.lease is not None, claim.outcome
        return claim.lease

    def deadline_ms(self, lease: Lease) -> float:
        return self.redis.zscore(self.journal.keys.tree_deadlines(lease.record.root), lease.run_id) or 0.0

    def holder(self, lease: Lease) -> str | None:
        return self.redis.get(self.journal.keys.run_lease(lease.run_id))

    async def aclose(self) -> None:
        for r in self.renewers:
            r.close()
        self.redis.close()
        await self.journal.client.aclose()


@pytest.fixture
async def world() -> AsyncIterator[World]:
    w = World(lease=600)  # ticks by hand: the thread's first tick is 150 s away
    yield w
    await w.aclose()


@pytest.fixture
async def fast() -> AsyncIterator[World]:
    w = World(lease=0.4)  # the thread ticks every 0.1 s
    yield w
    await w.aclose()


def block_loop_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Hold the calling event loop (a synchronous wait on its thread) until ``condition``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.02)


async def test_one_round_trip_renews_every_lease_the_process_holds(world: World):
    leases = [await world.lease(f"root{i}") for i in range(5)]  # five trees
    renewer, client = world.renewer()
    step = asyncio.current_task()
    assert step is not None
    for lease in leases:
        renewer.hold(lease, step)  # type: ignore[arg-type]
        world.redis.pexpire(world.journal.keys.run_lease(lease.run_id), 1000)
    await asyncio.to_thread(renewer.tick)  # loads the script
    client.sent.clear()
    await asyncio.to_thread(renewer.tick)
    assert client.sent == ["EVALSHA"]
    for lease in leases:
        assert world.redis.pttl(world.journal.keys.run_lease(lease.run_id)) > 1000
        assert world.holder(lease) == lease.token


async def test_on_a_cluster_one_round_trip_renews_each_trees_leases(world: World):
    leases = [await world.lease("rootA"), await world.lease("rootA-c1", "rootA"), await world.lease("rootB")]
    renewer, client = world.renewer(clustered=True)
    step = asyncio.current_task()
    for lease in leases:
        renewer.hold(lease, step)  # type: ignore[arg-type]
    await asyncio.to_thread(renewer.tick)
    client.sent.clear()
    await asyncio.to_thread(renewer.tick)
    assert client.sent == ["EVALSHA", "EVALSHA"]  # a script may touch one slot: one call per tree


async def test_an_event_loop_blocked_for_several_leases_keeps_its_lease(fast: World):
    lease = await fast.lease("root")
    renewer, _ = fast.renewer()
    renewer.hold(lease, asyncio.current_task())  # type: ignore[arg-type]
    claimed_ms = fast.deadline_ms(lease)
    # A step doing sync work on the loop for three leases' time: the renewer's thread renews anyway.
    block_loop_until(lambda: fast.deadline_ms(lease) > claimed_ms + 3 * fast.settings.lease_ms, 10,
                     "a renewal while the loop is blocked")
    assert fast.holder(lease) == lease.token
    assert not lease.lost


async def test_a_hung_event_loop_lets_its_lease_lapse(fast: World, caplog: pytest.LogCaptureFixture):
    lease = await fast.lease("root")
    renewer, _ = fast.renewer(hang_limit=0.3)
    renewer.hold(lease, asyncio.current_task())  # type: ignore[arg-type]
    # The loop does not run for longer than the hang limit: its leases are no longer renewed.
    with caplog.at_level(logging.INFO, logger=renewer_logger.name):
        block_loop_until(lambda: fast.holder(lease) is None, 10, "the hung loop's lease to lapse")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and re.search(r"has not run for 0\.[3-9]s|has not run for [1-9]", warnings[0]), warnings


class ClusterDown(Counting):
    """A cluster client whose every command fails with a routing error (not a ``RedisError``)."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        raise RedisClusterException("TTL exhausted.")


async def test_a_cluster_routing_error_loses_the_leases_about_to_lapse(world: World):
    lease = await world.lease("root")
    renewer = Renewer(world.settings, world.journal.keys, clustered=True,
                      connect=lambda: ClusterDown(server=world.server, decode_responses=True))
    world.renewers.append(renewer)
    step = asyncio.create_task(asyncio.Event().wait())
    renewer.hold(lease, step)
    lease.deadline = time.time()  # not renewed in time: it lapses before the next tick
    await asyncio.to_thread(renewer.tick)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(step, 10)  # the step is abandoned, as on any failed renewal
    assert lease.lost


async def test_the_renewer_connects_at_start_and_its_ticks_reuse_that_connection(world: World):
    connections: list[Counting] = []

    def connect() -> Counting:
        connections.append(Counting(server=world.server, decode_responses=True))
        return connections[-1]

    renewer = Renewer(world.settings, world.journal.keys, connect=connect)
    world.renewers.append(renewer)
    await asyncio.to_thread(renewer.connect)  # the worker's start, before any step
    assert connections and connections[0].sent == ["PING"]
    lease = await world.lease("root")
    renewer.hold(lease, asyncio.current_task())  # type: ignore[arg-type]
    await asyncio.to_thread(renewer.tick)
    assert len(connections) == 1 and "EVALSHA" in connections[0].sent  # no new connection mid-step


async def test_a_renewal_between_a_finish_and_the_steps_end_does_not_cancel_the_step(world: World):
    renewer, _ = world.renewer()
    world.journal.store.renewer = renewer  # the renewer the journal's leases are kept by
    lease = await world.lease("root1")
    step = asyncio.create_task(asyncio.sleep(60))  # the step: still after its finish (events, resume)
    renewer.hold(lease, step)
    await lease.finish("done", {"result": "ok"})  # its script deletes the lease
    await asyncio.to_thread(renewer.tick)
    # an abandon the tick scheduled on this loop (call_soon_threadsafe) runs before a callback queued now
    ran = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(ran.set_result, None)
    await ran
    assert not lease.lost and not step.cancelling() and not step.cancelled()
    step.cancel()
