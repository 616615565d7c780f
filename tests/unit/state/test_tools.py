"""The blackboard tools (Shelly behaviour 63, plus ``_delete`` and ``_watch``)."""

from __future__ import annotations

import asyncio
import json

import pytest

from shelly_dist.errors import ShellyError, ToolError
from shelly_dist.identity import acting_as
from shelly_dist.state import MemoryStore, state_tools
from shelly_dist.tools import ToolBox

NAMES = ["ns_state_get", "ns_state_set", "ns_state_list", "ns_state_delete", "ns_state_watch"]


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def box(store: MemoryStore) -> ToolBox:
    return state_tools(store, ns="ns")


async def call(box: ToolBox, name: str, args: object) -> str:
    tool = box.get(name)
    assert tool is not None, name
    return await tool.handler(args if isinstance(args, str) else json.dumps(args))


def test_exactly_five_tools_in_the_state_group(box: ToolBox) -> None:
    assert box.names() == NAMES
    assert {t.group for t in box} == {"state"}
    assert state_tools(MemoryStore()).names()[0] == "shared_state_get"


async def test_get_returns_the_stored_json(box: ToolBox, store: MemoryStore) -> None:
    await store.set("greeting", "hello")
    assert await call(box, "ns_state_get", {"key": "greeting"}) == '"hello"'


async def test_get_of_a_missing_key_is_key_not_found(box: ToolBox) -> None:
    with pytest.raises(ToolError, match="key not found"):
        await call(box, "ns_state_get", {"key": "nope"})


async def test_set_stores_the_value_as_the_running_agent(box: ToolBox, store: MemoryStore) -> None:
    with acting_as("writer"):
        assert await call(box, "ns_state_set", {"key": "x", "value": 42}) == "ok"
    entry = await store.get("x")
    assert entry is not None and (entry.value, entry.author) == (42, "writer")


async def test_set_requires_a_value(box: ToolBox) -> None:
    with pytest.raises(ToolError, match="value"):
        await call(box, "ns_state_set", {"key": "x"})


async def test_list_returns_sorted_keys_or_an_empty_array(box: ToolBox, store: MemoryStore) -> None:
    assert await call(box, "ns_state_list", {}) == "[]"
    await store.set("b", 1)
    await store.set("a", 2)
    assert json.loads(await call(box, "ns_state_list", {})) == ["a", "b"]


async def test_delete_removes_the_key_and_ignores_missing(box: ToolBox, store: MemoryStore) -> None:
    await store.set("a", 1)
    assert await call(box, "ns_state_delete", {"key": "a"}) == "ok"
    assert await store.get("a") is None
    assert await call(box, "ns_state_delete", {"key": "a"}) == "ok"


async def test_watch_returns_the_value_once_set(box: ToolBox, store: MemoryStore) -> None:
    watcher = asyncio.create_task(call(box, "ns_state_watch", {"key": "k", "timeout_s": 10}))
    done, _ = await asyncio.wait({watcher}, timeout=0.05)
    assert not done
    await store.set("k", {"v": 1})
    assert json.loads(await asyncio.wait_for(watcher, 10)) == {"v": 1}


async def test_watch_times_out_with_an_error(box: ToolBox) -> None:
    with pytest.raises(ShellyError, match="timed out"):
        await call(box, "ns_state_watch", {"key": "k", "timeout_s": 0.05})


@pytest.mark.parametrize("name", NAMES)
async def test_every_tool_errors_on_invalid_json(box: ToolBox, name: str) -> None:
    with pytest.raises(ToolError, match=f"{name}: invalid input"):
        await call(box, name, "{not json")
