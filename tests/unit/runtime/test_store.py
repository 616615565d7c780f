"""The run store's script runner (fakeredis): a hinted script hints its tree in the due index, in
the script itself on a single Redis, and the script's body sees only its own keys and args."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest

from shelly_dist.runtime.celery.journal.due import shard_of
from shelly_dist.runtime.celery.journal.store import RunStore
from shelly_dist.runtime.celery.settings import RuntimeSettings

COUNTED = "redis.call('INCR', KEYS[1]); return redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])"
"""A stand-in for a journal script that writes a deadline: counts its runs, then writes it."""


@pytest.fixture
async def store() -> AsyncIterator[RunStore]:
    client = fakeredis.FakeAsyncRedis(decode_responses=True)
    settings = RuntimeSettings(broker_url="memory://", redis_url="redis://",
                               key_prefix=f"t:{uuid.uuid4().hex[:6]}:")
    yield RunStore(client, settings)
    await client.aclose()


async def run_counted(store: RunStore, hint: tuple[str, int] | None) -> Any:
    script = store.client.register_script(COUNTED)
    await store.client.script_load(COUNTED)
    keys = [store.keys.prefix + "runs", store.keys.tree_deadlines("root")]
    return await store.run_script(script, keys, [7_000, "r1"], hint=hint)


async def hint_of(store: RunStore, root: str) -> float | None:
    return await store.client.zscore(store.keys.due_shard(shard_of(root)), root)


async def test_a_hinted_script_hints_its_tree_in_the_due_index(store: RunStore):
    await run_counted(store, hint=("root", 7_000))
    assert await hint_of(store, "root") == 7_000
    assert await store.client.zscore(store.keys.tree_deadlines("root"), "r1") == 7_000


async def test_a_script_without_a_hint_leaves_the_due_index_alone(store: RunStore):
    await run_counted(store, hint=None)
    assert await hint_of(store, "root") is None


async def test_a_hinted_script_sees_only_its_own_keys_and_args(store: RunStore):
    # the hint's keys and args ride at the end and are taken off before the body runs (#ARGV
    # counts the body's variadic messages in CHECKPOINT and FINISH)
    script = store.client.register_script("return {#KEYS, #ARGV, KEYS[#KEYS], ARGV[#ARGV]}")
    out = await store.run_script(script, ["k1", "k2"], ["a1", "a2", "a3"], hint=("root", 7_000))
    assert out == [2, 3, "k2", "a3"]
    assert await hint_of(store, "root") == 7_000
