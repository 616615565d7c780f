"""After a broker reconnect, the tasks the broker had taken are checked again soon
(``runtime/celery/worker/resync.py``): a run whose task was lost with the connection is re-sent after
``requeue_after``, not after the backstop; everything else keeps its deadline."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest

from shelly_dist.agent import ChildRequest
from shelly_dist.runtime.celery.journal import Journal
from shelly_dist.runtime.celery.journal.due import shard_of
from shelly_dist.runtime.celery.names import RUN_AGENT
from shelly_dist.runtime.celery.settings import RuntimeSettings
from shelly_dist.runtime.celery.worker.reaper import Reaper
from shelly_dist.runtime.celery.worker.resync import pull_backstops, redis_broker


@pytest.fixture
async def journal() -> AsyncIterator[Journal]:
    client = fakeredis.FakeAsyncRedis(decode_responses=True)
    settings = RuntimeSettings(broker_url="redis://", redis_url="redis://", key_prefix=f"t:{uuid.uuid4().hex[:6]}:",
                               lease=60.0, requeue_after=30.0)
    yield Journal(client, settings)
    await client.aclose()


class Sent:
    def __init__(self) -> None:
        self.tasks: list[tuple[str, list[Any]]] = []

    async def __call__(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> None:
        self.tasks.append((name, args))


def request(i: int) -> ChildRequest:
    return ChildRequest(key=f"c:{i}", tool_call_id="c", index=i, agent="w", task=f"t{i}", depth=1,
                        visited=["lead", "w"], parent_run_id="root", parent_agent="lead")


async def sent_children(journal: Journal, n: int) -> list[str]:
    """A parent that registered ``n`` children whose tasks the broker took (their backstops set)."""
    await journal.create_root("root", agent="lead", session="s", mode="worker", task="go", fingerprint="fp")
    claim = await journal.claim("root", "root", "holder", "w0")
    assert claim.lease is not None
    ids, _ = await claim.lease.expect([request(i) for i in range(n)], 1, "fp")
    await claim.lease.release()
    for cid in ids:
        await journal.sent("root", cid, True)
    return ids


async def test_a_backstop_is_pulled_in_to_requeue_after(journal: Journal):
    ids = await sent_children(journal, 2)
    now = time.time()
    assert await pull_backstops(journal, now=now) == 2
    scores = [await journal.client.zscore(journal.keys.tree_deadlines("root"), cid) for cid in ids]
    assert scores == [int((now + 30.0) * 1000)] * 2


async def test_a_deadline_before_the_cut_is_left_alone(journal: Journal):
    await journal.create_root("root", agent="lead", session="s", mode="worker", task="go", fingerprint="fp")
    before = await journal.client.zscore(journal.keys.tree_deadlines("root"), "root")
    assert await pull_backstops(journal, now=time.time()) == 0
    assert await journal.client.zscore(journal.keys.tree_deadlines("root"), "root") == before


async def test_the_pulled_tree_is_hinted_at_the_cut(journal: Journal):
    await sent_children(journal, 1)
    now = time.time()
    shard = journal.keys.due_shard(shard_of("root"))
    await journal.client.zadd(shard, {"root": int((now + 3600.0) * 1000)})  # hinted at the backstops
    await pull_backstops(journal, now=now)
    assert await journal.client.zscore(shard, "root") == int((now + 30.0) * 1000)


async def test_a_lost_task_is_sent_again_by_the_reaper_once_the_cut_passes(journal: Journal):
    ids = await sent_children(journal, 1)
    await pull_backstops(journal, now=time.time() - 31.0)  # the reconnect was requeue_after ago
    sent = Sent()
    await Reaper(journal, sent, "fp").scan()
    assert sent.tasks == [(RUN_AGENT, [ids[0], "root"])]


@pytest.mark.parametrize(("url", "redis"), [("redis://h:6379/1", True), ("rediss://h/1", True),
                                            ("sentinel://h:26379", True), ("amqp://guest@h//", False)])
def test_only_a_redis_broker_is_re_checked_after_a_reconnect(url: str, redis: bool):
    assert redis_broker(url) is redis
