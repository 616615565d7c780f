"""On a Redis Cluster the run trees' wake-up channels are sharded pub/sub (``redisio/sharded.py``):
scripts ``SPUBLISH``, waits ``SSUBSCRIBE`` on the node owning the tree's slot, and no message
crosses the cluster bus; on one Redis the channels stay classic."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio.cluster import RedisCluster

from shelly_dist.agent import ChildRequest, DelegateEntry
from shelly_dist.errors import StoreError
from shelly_dist.redisio.connection import connect
from shelly_dist.redisio.hub import Hub, Watch
from shelly_dist.redisio.sharded import check_sharded_pubsub, refuse_old, too_old
from shelly_dist.redisio.subscription import Subscription
from shelly_dist.runtime.celery.children.cancel import cancel_tree
from shelly_dist.runtime.celery.journal import Journal, control_scripts, scripts
from shelly_dist.runtime.celery.journal.registry import registered
from shelly_dist.runtime.celery.settings import RuntimeSettings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

LONG_POLL = 30.0
"""A poll interval no test waits out: a watch that moves did so on a message."""

REPUBLISH = 0.1
"""Seconds between publishes that no subscriber received yet, while a test waits (under its own
deadline) for the hub to have resubscribed; the first publish a subscriber receives ends the wait."""


@pytest.fixture
async def journal(redis_cluster_url: str) -> AsyncIterator[Journal]:
    client = connect(redis_cluster_url)
    await client.initialize()  # the slot map, for the tests' own routing
    settings = RuntimeSettings(broker_url="redis://127.0.0.1:6379/5", redis_url=redis_cluster_url,
                               key_prefix=f"shelly-test:{uuid.uuid4().hex[:12]}:", lease=5.0, requeue_after=0.5)
    yield Journal(client, settings)
    await client.aclose()


@contextlib.asynccontextmanager
async def tree_hub(client: RedisCluster, poll: float = LONG_POLL) -> AsyncIterator[Hub]:
    hub = Hub(client, poll, tree=True)
    try:
        yield hub
    finally:
        await hub.aclose()


def child(i: int) -> ChildRequest:
    return ChildRequest(key=f"call_1:{i}", tool_call_id="call_1", index=i, agent="w", task=f"t{i}", depth=1,
                        visited=["lead", "w"], parent_run_id="root1", parent_agent="lead")


async def subscribers(client: RedisCluster, channel: str) -> tuple[int, int]:
    """(sharded, classic) subscribers of ``channel`` on the node owning its slot."""
    node = client.get_node_from_key(channel)
    sharded = await client.execute_command("PUBSUB", "SHARDNUMSUB", channel, target_nodes=node)
    classic = await client.execute_command("PUBSUB", "NUMSUB", channel, target_nodes=node)
    return int(sharded[1]), int(classic[1])


async def publishes_over_the_bus(client: RedisCluster) -> int:
    """Classic ``PUBLISH``es the nodes have forwarded over the cluster bus so far."""
    infos = await client.execute_command("CLUSTER INFO", target_nodes=RedisCluster.PRIMARIES)
    return sum(int(info.get("cluster_stats_messages_publish_sent", 0)) for info in infos.values())


async def moved_with(watch: Watch, since: int, position: int) -> list[str | None]:
    await asyncio.wait_for(watch.moved(since), 10)
    return watch.hints_since(position)[0]


async def test_a_tree_watch_is_a_sharded_subscription_on_the_node_owning_its_slot(journal: Journal) -> None:
    async with tree_hub(journal.client) as hub:
        watch = await hub.watch(journal.keys.run_changed("root1"))
        assert await subscribers(journal.client, watch.channel) == (1, 0)


async def test_a_childs_join_wakes_the_waiting_coordinator_with_no_publish_over_the_cluster_bus(
        journal: Journal) -> None:
    await journal.create_root("root1", agent="lead", session="sess-1", mode="coordinator", task="go",
                              fingerprint="fp")
    parent = (await journal.claim("root1", "root1", "tok-root", "w0", session="sess-1", agent="lead")).lease
    assert parent is not None
    ids, _ = await parent.expect([child(0)], 1, "fp")
    got = (await journal.claim(ids[0], "root1", "tok-0", "w1", session="sess-1", agent="w")).lease
    assert got is not None
    async with tree_hub(journal.client) as hub:
        watch = await hub.watch(journal.keys.run_changed("root1"))
        seen, position, bus = watch.generation, watch.position, await publishes_over_the_bus(journal.client)
        await got.finish("done", DelegateEntry(agent="w", result="r0").to_json())
        assert await moved_with(watch, seen, position) == ["child|1:call_1:0"]
        assert await publishes_over_the_bus(journal.client) == bus


async def test_a_sharded_hub_hands_on_a_message_from_any_node_at_once(journal: Journal) -> None:
    client = journal.client
    roots: dict[str, str] = {}
    while len(roots) < 3:  # one tree on each node
        root = uuid.uuid4().hex
        roots.setdefault(client.get_node_from_key(journal.keys.run_changed(root)).name, root)
    async with tree_hub(client) as hub:
        watches = [await hub.watch(journal.keys.run_changed(root)) for root in roots.values()]
        for watch in reversed(watches):  # the last node first: no node's read waits out another's
            seen, position = watch.generation, watch.position
            assert await client.spublish(watch.channel, "x") == 1
            assert await moved_with(watch, seen, position) == ["x"]


async def test_a_cancel_wakes_a_waiting_runs_sharded_watch(journal: Journal) -> None:
    await journal.create_root("root1", agent="lead", session="sess-1", mode="coordinator", task="go",
                              fingerprint="fp")
    parent = (await journal.claim("root1", "root1", "tok-root", "w0", session="sess-1", agent="lead")).lease
    assert parent is not None
    ids, _ = await parent.expect([child(0)], 1, "fp")  # queued: the cancel ends it and announces it
    async with tree_hub(journal.client) as hub:
        watch = await hub.watch(journal.keys.run_changed(ids[0]))
        seen, position = watch.generation, watch.position
        await cancel_tree(journal.client, journal.keys, "root1")
        assert await moved_with(watch, seen, position) == ["canceled"]


async def test_a_tree_subscription_is_confirmed_and_woken_sharded_on_a_cluster(journal: Journal) -> None:
    channel = journal.keys.run_changed("root1")
    async with Subscription(journal.client, channel, poll_interval=LONG_POLL, tree=True) as sub:
        assert await subscribers(journal.client, channel) == (1, 0)
        assert await journal.client.spublish(channel, "answer") == 1
        assert await asyncio.wait_for(sub.message(LONG_POLL), 10) == "answer"


async def test_after_its_connections_are_killed_a_sharded_hub_resubscribes_and_messages_arrive_again(
        journal: Journal) -> None:
    client = journal.client
    async with tree_hub(client, poll=0.5) as hub:
        watch = await hub.watch(journal.keys.run_changed("root1"))
        node = client.get_node_from_key(watch.channel)
        await client.execute_command("CLIENT KILL", "TYPE", "pubsub", target_nodes=node)

        async def delivered() -> None:
            while True:
                seen, position = watch.generation, watch.position
                if await client.spublish(watch.channel, "again"):  # resubscribed: a subscriber received it
                    while "again" not in watch.hints_since(position)[0]:
                        await watch.moved(seen)
                        seen = watch.generation
                    return
                await asyncio.sleep(REPUBLISH)

        await asyncio.wait_for(delivered(), 30)


async def test_a_sharded_watch_follows_its_channels_slot_to_another_node(journal: Journal,
                                                                         redis_cluster_url: str) -> None:
    client = journal.client
    channel = journal.keys.run_changed(uuid.uuid4().hex)
    slot, old = client.keyslot(channel), client.get_node_from_key(channel)
    assert await client.execute_command("CLUSTER COUNTKEYSINSLOT", slot, target_nodes=old) == 0  # movable at once
    new = next(n for n in client.get_primaries() if n.name != old.name)
    ids = {n.name: await client.execute_command("CLUSTER MYID", target_nodes=n) for n in client.get_primaries()}

    async def give(node: str) -> None:
        for n in client.get_primaries():
            await client.execute_command("CLUSTER SETSLOT", slot, "NODE", ids[node], target_nodes=n)

    publisher = connect(redis_cluster_url)  # another process's client: the hub's learns of the move by itself
    async with tree_hub(client) as hub:
        watch = await hub.watch(channel)
        await give(new.name)
        try:
            async def delivered() -> None:
                while True:
                    position = watch.position
                    if await publisher.spublish(channel, "moved"):  # a subscriber on the new owner got it
                        while "moved" not in watch.hints_since(position)[0]:
                            await watch.moved(watch.generation)
                        return
                    await asyncio.sleep(REPUBLISH)

            await asyncio.wait_for(delivered(), 20)  # well inside the hub's poll interval (LONG_POLL)
        finally:
            await give(old.name)
            await publisher.aclose()


async def test_watches_coming_and_going_on_one_node_never_fail_the_sharded_hub(
        journal: Journal, caplog: pytest.LogCaptureFixture) -> None:
    client = journal.client
    node = client.get_node_from_key(journal.keys.run_changed("root1"))
    roots = [r for r in (uuid.uuid4().hex for _ in range(400))
             if client.get_node_from_key(journal.keys.run_changed(r)).name == node.name][:60]

    async def come_and_go(root: str) -> None:
        watch = await hub.watch(journal.keys.run_changed(root))
        await watch.aclose()

    async with tree_hub(client) as hub:
        for i in range(0, len(roots), 3):  # the node's connection closes and reopens under the reads
            await asyncio.gather(*(come_and_go(r) for r in roots[i:i + 3]))
    assert not [r for r in caplog.records if r.name == "shelly_dist.redisio.hub"], caplog.text


async def test_the_journal_scripts_publish_sharded_on_a_cluster(journal: Journal) -> None:
    finish = registered(journal.client).journal.finish.script
    assert "redis.call('SPUBLISH', " in finish and "redis.call('PUBLISH', " not in finish


async def test_the_journal_scripts_stay_classic_on_one_redis(redis_url: str) -> None:
    client = connect(redis_url)
    try:
        assert registered(client).journal.finish.script == control_scripts.plain_text(scripts.FINISH)
    finally:
        await client.aclose()


async def test_the_start_check_passes_on_a_cluster_of_redis_7(journal: Journal) -> None:
    await check_sharded_pubsub(journal.client)


def test_the_start_check_names_each_cluster_node_older_than_redis_7() -> None:
    infos = {"10.0.0.1:6379": {"redis_version": "6.2.14"}, "10.0.0.2:6379": {"redis_version": "7.0.15"}}
    assert too_old(infos) == ["10.0.0.1:6379 (6.2.14)"]
    with pytest.raises(StoreError, match=r"Redis 7\.0 or newer.*10\.0\.0\.1:6379 \(6\.2\.14\)"):
        refuse_old(infos)


def test_the_start_check_names_a_lone_primary_older_than_redis_7() -> None:
    with pytest.raises(StoreError, match=r"Redis 7\.0 or newer.*one primary \(6\.2\.14\)"):
        refuse_old({"redis_version": "6.2.14"})  # redis-py's bare reply when one node answers
