"""The blackboard contract (Shelly behaviours 61–62, plus versions, authors and CAS), run against
every backend: in memory, fakeredis and the real Redis."""

from __future__ import annotations

import asyncio

import pytest

from shelly_dist.errors import StoreError
from shelly_dist.identity import acting_as
from shelly_dist.state import Store


async def assert_still_waiting(task: asyncio.Task[object]) -> None:
    """The task has not finished (giving it a moment to subscribe and block)."""
    done, _ = await asyncio.wait({task}, timeout=0.05)
    assert not done, f"watch returned early: {task.result() if not task.cancelled() else 'cancelled'}"


async def test_set_then_get_returns_the_value_with_version_1(store: Store) -> None:
    entry = await store.set("k", {"a": [1, 2]})
    got = await store.get("k")
    assert got is not None
    assert (got.value, got.version) == ({"a": [1, 2]}, 1)
    assert got == entry


async def test_get_of_a_missing_key_is_none(store: Store) -> None:
    assert await store.get("nope") is None


async def test_each_set_increments_the_version(store: Store) -> None:
    await store.set("k", 1)
    await store.set("k", 2)
    entry = await store.set("k", 3)
    assert entry.version == 3
    assert (await store.get("k")).version == 3  # type: ignore[union-attr]


async def test_set_records_the_running_agent_as_author(store: Store) -> None:
    with acting_as("coder-1"):
        await store.set("k", "v")
    entry = await store.get("k")
    assert entry is not None and entry.author == "coder-1" and entry.updated_at > 0


async def test_values_are_copied_in_and_out(store: Store) -> None:
    value = {"list": [1]}
    await store.set("k", value)
    value["list"].append(2)
    got = await store.get("k")
    assert got is not None
    got.value["list"].append(3)
    snap = await store.snapshot()
    snap["k"]["list"].append(4)
    assert (await store.get("k")).value == {"list": [1]}  # type: ignore[union-attr]


async def test_any_json_value_round_trips(store: Store) -> None:
    for value in (None, True, 0, -1.5, "", "héllo", [], {}, [{"x": None}], 2**60):
        await store.set("k", value)
        assert (await store.get("k")).value == value  # type: ignore[union-attr]


async def test_a_non_json_value_is_rejected_naming_the_key(store: Store) -> None:
    with pytest.raises(StoreError, match=r"'k'.*not JSON"):
        await store.set("k", {1, 2})


async def test_delete_removes_the_key_and_missing_is_a_noop(store: Store) -> None:
    await store.set("k", 1)
    assert await store.delete("k") is True
    assert await store.get("k") is None
    assert await store.delete("k") is False


async def test_delete_resets_the_version(store: Store) -> None:
    await store.set("k", 1)
    await store.set("k", 2)
    await store.delete("k")
    assert (await store.set("k", 3)).version == 1


async def test_keys_entries_and_snapshot_are_sorted(store: Store) -> None:
    assert await store.keys() == []
    assert await store.snapshot() == {}
    for key in ("b", "c", "a"):
        await store.set(key, key.upper())
    assert await store.keys() == ["a", "b", "c"]
    assert list(await store.entries()) == ["a", "b", "c"]
    assert await store.snapshot() == {"a": "A", "b": "B", "c": "C"}


async def test_compare_and_set_writes_only_at_the_expected_version(store: Store) -> None:
    first = await store.compare_and_set("k", "one", 0)
    assert first is not None and first.version == 1
    assert await store.compare_and_set("k", "lost", 0) is None
    assert await store.compare_and_set("k", "lost", 2) is None
    second = await store.compare_and_set("k", "two", 1)
    assert second is not None and second.version == 2
    assert (await store.get("k")).value == "two"  # type: ignore[union-attr]


async def test_watch_on_an_existing_key_returns_at_once(store: Store) -> None:
    await store.set("k", "here")
    assert (await store.watch("k", timeout=5)).value == "here"


async def test_watch_blocks_until_the_key_is_set(store: Store) -> None:
    watcher = asyncio.create_task(store.watch("k", timeout=10))
    await assert_still_waiting(watcher)
    await store.set("other", 1)
    await assert_still_waiting(watcher)
    await store.set("k", 42)
    entry = await asyncio.wait_for(watcher, 10)
    assert entry.value == 42


async def test_watch_times_out_with_a_store_error(store: Store) -> None:
    with pytest.raises(StoreError, match=r"timed out after 0\.1s waiting for key 'k'") as info:
        await store.watch("k", timeout=0.1)
    assert info.value.key == "k"


async def test_cancelling_a_watch_propagates(store: Store) -> None:
    watcher = asyncio.create_task(store.watch("k"))
    await assert_still_waiting(watcher)
    watcher.cancel()
    with pytest.raises(asyncio.CancelledError):
        await watcher


async def test_many_watchers_all_wake_on_one_set(store: Store) -> None:
    watchers = [asyncio.create_task(store.watch("k", timeout=10)) for _ in range(5)]
    await assert_still_waiting(watchers[-1])
    await store.set("k", "go")
    results = await asyncio.wait_for(asyncio.gather(*watchers), 10)
    assert [e.value for e in results] == ["go"] * 5
