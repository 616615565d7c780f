"""The ``<blackboard>`` prompt section."""

from __future__ import annotations

from shelly_dist.state import MemoryStore, blackboard_prompt, blackboard_section


def test_an_empty_blackboard_gives_no_section() -> None:
    assert blackboard_section({}) == ""


def test_the_section_lists_keys_in_order_as_json() -> None:
    section = blackboard_section({"b": {"x": [1]}, "a": "hi"})
    assert section == '<blackboard>\na: "hi"\nb: {"x":[1]}\n</blackboard>'


def test_a_large_blackboard_is_capped_with_a_visible_marker() -> None:
    section = blackboard_section({f"k{i:03}": "v" * 50 for i in range(100)}, limit_chars=500)
    assert section.startswith("<blackboard>\nk000:") and section.endswith("\n</blackboard>")
    assert "blackboard truncated" in section and "shared_state_get" in section
    body = section.removeprefix("<blackboard>\n").split("\n[… blackboard truncated")[0]
    assert len(body) == 500


async def test_blackboard_prompt_renders_the_store_snapshot() -> None:
    store = MemoryStore()
    await store.set("plan", "ship it")
    assert await blackboard_prompt(store) == '<blackboard>\nplan: "ship it"\n</blackboard>'
