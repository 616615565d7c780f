"""The global due index (fakeredis): hints only ever lower a tree's score, a scanner's settle
never hides a deadline a writer hinted while the tree was being checked, and each shard has one
scanner at a time."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import fakeredis
import pytest

from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.journal.due import SHARDS, DueIndex, shard_of


@pytest.fixture
async def due() -> AsyncIterator[DueIndex]:
    client = fakeredis.FakeAsyncRedis(decode_responses=True)
    yield DueIndex(client, Keys(f"t:{uuid.uuid4().hex[:6]}:"), retention=3600)
    await client.aclose()


def now_ms() -> int:
    return int(time.time() * 1000)


async def score(due: DueIndex, root: str) -> float | None:
    return await due.client.zscore(due.keys.due_shard(shard_of(root)), root)


async def test_a_hint_only_ever_moves_a_tree_earlier(due: DueIndex):
    await due.hint("abc", 5_000)
    await due.hint("abc", 9_000)
    assert await score(due, "abc") == 5_000
    await due.hint("abc", 1_000)
    assert await score(due, "abc") == 1_000


async def test_a_tree_is_found_only_once_its_hint_has_passed(due: DueIndex):
    await due.hint("late", now_ms() + 60_000)
    await due.hint("now", now_ms() - 1)
    found = [root for root, _ in await due.due(range(SHARDS), now_ms(), 100)]
    assert found == ["now"]


async def test_a_checked_tree_with_nothing_left_leaves_the_index(due: DueIndex):
    await due.hint("abc", now_ms() - 1)
    [(root, seen)] = await due.due([shard_of("abc")], now_ms(), 100)
    await due.settle(root, seen, None)
    assert await score(due, "abc") is None


async def test_a_checked_tree_is_hinted_at_its_next_deadline(due: DueIndex):
    await due.hint("abc", now_ms() - 1)
    [(root, seen)] = await due.due([shard_of("abc")], now_ms(), 100)
    await due.settle(root, seen, now_ms() + 30_000)
    assert await score(due, "abc") > now_ms() + 20_000


async def test_a_deadline_hinted_while_its_tree_was_checked_is_never_hidden(due: DueIndex):
    await due.hint("abc", now_ms() - 1)
    [(root, seen)] = await due.due([shard_of("abc")], now_ms(), 100)
    # The scanner read the tree (nothing due, nothing left); a writer then wrote a deadline into
    # the tree and hinted it, before the scanner settled the tree.
    written = now_ms() + 10_000
    await due.hint("abc", written)
    await due.settle(root, seen, None)
    assert (await score(due, "abc") or float("inf")) <= written


async def test_each_shard_has_one_scanner_until_its_lease_lapses(due: DueIndex):
    t = now_ms()
    assert await due.elect("a", t, 6_000) == list(range(SHARDS))
    assert await due.elect("b", t + 1_000, 6_000) == []
    assert await due.elect("a", t + 2_000, 6_000) == list(range(SHARDS)), "the holder keeps its shards"
    assert await due.elect("b", t + 9_000, 6_000) == list(range(SHARDS)), "a lapsed scanner's shards are taken over"
