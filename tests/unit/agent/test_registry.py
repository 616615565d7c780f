"""The registry (behaviours 19–23): lookup, sorted listing, spawning, replacing, per-name counters."""

from __future__ import annotations

import threading

import pytest

from shelly_dist.agent import Agent, Entry, Factory, Registry
from shelly_dist.errors import AgentError
from shelly_dist.providers import ScriptedCompleter


def factory_for(name: str, description: str = "") -> Factory:
    def factory() -> Agent:
        return Agent(name, description, completer=ScriptedCompleter(["ok"]))

    return factory


def test_get_of_an_unknown_name_is_none() -> None:
    assert Registry().get("ghost") is None


def test_list_is_empty_when_nothing_is_registered() -> None:
    assert Registry().list() == []


def test_list_is_sorted_by_name() -> None:
    reg = Registry()
    for name in ("zeta", "alpha", "mid"):
        reg.register(name, "", factory_for(name))
    assert [e.name for e in reg.list()] == ["alpha", "mid", "zeta"]


def test_get_returns_the_registered_entry() -> None:
    reg = Registry()
    reg.register("coder", "writes code", factory_for("coder"))
    assert reg.get("coder") == Entry(name="coder", description="writes code")


def test_spawn_sets_depth_and_config_name() -> None:
    reg = Registry()
    reg.register("coder", "", factory_for("whatever-the-factory-says"))
    agent = reg.spawn("coder", 2)
    assert (agent.depth, agent.config_name) == (2, "coder")


def test_spawn_returns_a_new_instance_every_call() -> None:
    reg = Registry()
    reg.register("coder", "", factory_for("coder"))
    a, b = reg.spawn("coder"), reg.spawn("coder")
    assert a is not b
    assert a.chat is not b.chat


def test_spawn_wires_the_registry_into_the_agent() -> None:
    reg = Registry()
    reg.register("coder", "", factory_for("coder"))
    assert reg.spawn("coder").registry is reg


def test_spawn_of_an_unknown_name_raises_not_found() -> None:
    with pytest.raises(AgentError, match='registry: agent "ghost" not found') as info:
        Registry().spawn("ghost")
    assert info.value.agent == "ghost"


def test_registering_an_existing_name_replaces_description_and_factory() -> None:
    reg = Registry()
    reg.register("coder", "old", factory_for("coder", "old agent"))
    reg.register("coder", "new", factory_for("coder", "new agent"))
    entry = reg.get("coder")
    assert entry is not None and entry.description == "new"
    assert reg.spawn("coder").description == "new agent"
    assert len(reg.list()) == 1


def test_register_entry_replaces_an_existing_registration() -> None:
    reg = Registry()
    reg.register("coder", "old", factory_for("coder", "old agent"))
    reg.register_entry(Entry(name="coder", description="new", skills=["x"]), factory_for("coder", "new agent"))
    assert reg.get("coder") == Entry(name="coder", description="new", skills=["x"])
    assert reg.spawn("coder").description == "new agent"


def test_next_id_counts_from_one_separately_per_name() -> None:
    reg = Registry()
    got = [reg.next_id("coder"), reg.next_id("coder"), reg.next_id("reviewer"), reg.next_id("coder")]
    assert got == [1, 2, 1, 3]


def test_next_id_is_unique_under_concurrent_threads() -> None:
    reg = Registry()
    ids: list[int] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(200):
            n = reg.next_id("coder")
            with lock:
                ids.append(n)

    threads = [threading.Thread(target=take) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(ids) == list(range(1, 1001))


def test_a_full_entry_keeps_skills_cost_and_max_concurrency() -> None:
    reg = Registry()
    reg.register(
        "coder", "writes code", factory_for("coder"), skills=["a", "b"], estimated_cost="high", max_concurrency=3
    )
    entry = reg.get("coder")
    assert entry is not None
    assert (entry.skills, entry.estimated_cost, entry.max_concurrency) == (["a", "b"], "high", 3)
    assert entry.to_json() == {
        "name": "coder",
        "description": "writes code",
        "skills": ["a", "b"],
        "estimated_cost": "high",
        "max_concurrency": 3,
    }


def test_a_minimal_entry_has_empty_values_left_out_of_its_json() -> None:
    reg = Registry()
    reg.register("coder", "", factory_for("coder"))
    entry = reg.get("coder")
    assert entry is not None
    assert (entry.skills, entry.estimated_cost, entry.max_concurrency) == ([], "", 0)
    assert entry.to_json() == {"name": "coder"}
