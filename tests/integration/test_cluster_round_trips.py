"""What concurrent children cost a Redis Cluster in round trips: the socket reads the nodes process
(``INFO stats`` ``total_reads_processed``, summed over the nodes) while many children of one tree
are claimed and finished at once by one process, as a worker's event loop runs them. On a cluster
each step of the children of one loop turn (their hints before and after a claim, the scripts,
the instance counters, the session's events) shares one pipeline (``TurnPipeline``), so a child
costs a fraction of a round trip, not seven; and the shared hints still keep the due index no
later than the truth."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from shelly_dist.agent import ChildRequest, DelegateEntry, RunState
from shelly_dist.chats import Message, Role
from shelly_dist.redisio.connection import connect
from shelly_dist.runtime.celery.client.events import read_events
from shelly_dist.runtime.celery.journal import Journal, Lease
from shelly_dist.runtime.celery.journal.due import shard_of
from shelly_dist.runtime.celery.settings import RuntimeSettings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CHILDREN = 20
STATE = RunState(run_id="c", config_name="w", instance_name="w")
READS_PER_CHILD = 1.0
"""Socket reads over the nodes per concurrently claimed and finished child. One process's children
of one loop turn share each step's pipeline (their hints before, their ``CLAIM``s, their hints
after, their instance numbers, their ``FINISH``es, their events: ≈ 0.4 a child for 20); a child
that makes its own round trip for any of its seven steps (7 reads a child before) fails here."""


def request(i: int) -> ChildRequest:
    return ChildRequest(key=f"call_1:{i}", tool_call_id="call_1", index=i, agent="w", task=f"t{i}", depth=1,
                        visited=["lead", "w"], parent_run_id="parent", parent_agent="lead")


def step_events(text: str) -> str:
    return json.dumps([{"kind": "message", "agent": "w", "session_id": "s", "data": {"text": text}}])


async def one_child(journal: Journal, child_id: str) -> Lease:
    """A fresh child's life on a worker that replies at once: claimed (numbered), its reply held,
    finished with its step's events. Returns its (finished) lease."""
    claim = await journal.claim(child_id, "parent", uuid.uuid4().hex, "w1", session="s", agent="w", fingerprint="fp")
    assert claim.lease is not None, claim.outcome
    claim.lease.hold(0, STATE, [Message(role=Role.USER, content="t"), Message(role=Role.ASSISTANT, content="ok")])
    await claim.lease.finish("done", DelegateEntry(agent="w", result="ok").to_json(), events=step_events(child_id))
    return claim.lease


async def reads_during(client: Any, action: Callable[[], Awaitable[Any]]) -> int:
    """Socket reads the cluster's nodes processed from clients while ``action`` ran (this count's
    own ``INFO`` calls left out)."""
    nodes = [aioredis.Redis(host=n.host, port=n.port) for n in client.get_nodes()]
    try:
        before = [int((await n.info("stats"))["total_reads_processed"]) for n in nodes]
        await action()
        after = [int((await n.info("stats"))["total_reads_processed"]) for n in nodes]
    finally:
        for n in nodes:
            await n.aclose()
    return sum(after) - sum(before) - len(nodes)  # the second INFO's own read on each node


@pytest.fixture
async def journal(redis_cluster_url: str) -> AsyncIterator[Journal]:
    client = connect(redis_cluster_url)
    prefix = f"shelly-test:{uuid.uuid4().hex[:12]}:"
    settings = RuntimeSettings(broker_url="redis://127.0.0.1:6379/5", redis_url=redis_cluster_url, key_prefix=prefix)
    yield Journal(client, settings)
    await client.aclose()


async def parent_of(journal: Journal, n: int) -> list[str]:
    """A claimed worker-driven parent that expects ``n`` children and already ran ``n`` at once (the
    scripts are loaded and the client's connections open on every node: no ``NOSCRIPT`` and no
    connection's handshake in the counts); the ``n`` children's ids."""
    await journal.create_root("parent", agent="lead", session="s", mode="worker", task="go", fingerprint="fp")
    claim = await journal.claim("parent", "parent", "parent-token", "w0", fingerprint="fp")
    assert claim.lease is not None
    warm, _ = await claim.lease.expect([request(i) for i in range(n)], 1, "fp")
    await asyncio.gather(*(journal.sent("parent", cid, True) for cid in warm))
    await asyncio.gather(*(one_child(journal, cid) for cid in warm))
    ids, _ = await claim.lease.expect([request(i) for i in range(n)], 2, "fp")
    return ids


async def test_concurrent_children_share_the_round_trips_outside_their_trees_slot(journal: Journal) -> None:
    ids = await parent_of(journal, CHILDREN)

    async def children() -> None:
        await asyncio.gather(*(one_child(journal, cid) for cid in ids))

    reads = await reads_during(journal.client, children)
    assert reads <= READS_PER_CHILD * CHILDREN, reads / CHILDREN


async def test_concurrent_fresh_children_each_get_their_own_instance_number(journal: Journal) -> None:
    ids = await parent_of(journal, CHILDREN)
    leases = await asyncio.gather(*(one_child(journal, cid) for cid in ids))
    numbers = [lease.record.instance_n for lease in leases]
    assert sorted(numbers) == list(range(CHILDREN + 1, 2 * CHILDREN + 1)), numbers  # 1…n: the warm-up
    stored = [(await journal.fields(cid))["instance_n"] for cid in ids]
    assert stored == [str(n) for n in numbers]


async def test_concurrent_children_append_each_step_s_events_to_the_session_stream(journal: Journal) -> None:
    ids = await parent_of(journal, CHILDREN)
    await asyncio.gather(*(one_child(journal, cid) for cid in ids))
    texts = [str(e.data.get("text")) async for _, e in read_events(journal.client, journal.keys, "s")]
    assert sorted(t for t in texts if t in ids) == sorted(ids)


async def test_concurrent_claims_leave_the_tree_hinted_no_later_than_their_lease_deadlines(journal: Journal) -> None:
    ids = await parent_of(journal, CHILDREN)
    shard = shard_of("parent")
    # a scanner settled the tree far off meanwhile (as after checking it before these claims)
    await journal.client.zadd(journal.keys.due_shard(shard), {"parent": 2**50})
    claims = await asyncio.gather(*(journal.claim(cid, "parent", uuid.uuid4().hex, "w1", session="s", agent="w",
                                                  fingerprint="fp") for cid in ids))
    deadlines = await journal.client.zmscore(journal.keys.tree_deadlines("parent"), ids)
    hint = await journal.client.zscore(journal.keys.due_shard(shard), "parent")
    assert all(c.outcome == "ok" for c in claims)
    assert hint is not None and hint <= min(deadlines), (hint, min(deadlines))


async def test_the_sends_of_a_fan_out_are_recorded_in_one_round_trip_per_node(journal: Journal) -> None:
    ids = await parent_of(journal, CHILDREN)

    async def sent() -> None:
        await asyncio.gather(*(journal.sent("parent", cid, True) for cid in ids))

    reads = await reads_during(journal.client, sent)
    assert reads <= len(journal.client.get_nodes()), reads
    leases = await journal.client.zmscore(journal.keys.tree_deadlines("parent"), ids)
    assert all(d is not None for d in leases)  # each SENT moved its run's deadline to the backstop
