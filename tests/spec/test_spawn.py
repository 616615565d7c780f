"""``spawn`` behaves the same embedded and on the pool: children run while the lead works, and
each one's outcome is announced into the lead's chat, once, before its next model call."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shelly_dist.chats import Message, Role
from shelly_dist.engine import Engine
from shelly_dist.events import Event

from .support import Cluster, Scenario, cluster, write_team

__all__ = ["cluster"]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

LEAD = {"name": "lead", "options": {"max_delegation_depth": 1}}


def spawn(*tasks: str, **extra: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": "spawn", "arguments": {"agent": "worker", "task": t, **extra}} for t in tasks]}


def announced(messages: list[Message]) -> list[str]:
    """The lead's announcements, durations and run ids masked (they differ between runs)."""
    texts = [m.text_content() for m in messages if m.role == Role.USER and m.text_content().startswith("[Spawn")]
    texts = [re.sub(r"\(run: [^)]+\)", "(run: ID)", t) for t in texts]
    return sorted(re.sub(r"in [0-9.]+s|after [0-9.]+s", "in Ts", t) for t in texts)


def ended_workers(n: int) -> Callable[[list[Event]], bool]:
    """Seen once ``n`` spawned ``worker`` runs have ended."""
    return lambda seen: len({e.run_id for e in seen if e.kind == "run_finished"
                             and e.data["entry"].get("agent") == "worker"}) >= n


def lead_calls_ended(n: int) -> Callable[[list[Event]], bool]:
    """Seen once ``n`` tool calls of the lead have ended."""
    return lambda seen: sum(e.kind == "tool_call_end" and e.agent == "lead" for e in seen) >= n


async def run_lead(cluster: Cluster, scenario: Scenario, runtime: str, gate: Path,
                   open_when: Callable[[list[Event]], bool]) -> list[Message]:
    """Run the lead; open ``gate`` (a held model call) once the events seen satisfy ``open_when``."""
    write_team(cluster, scenario, runtime)
    if runtime == "pool":
        cluster.start_worker("w1")
    await asyncio.to_thread(gate.unlink, missing_ok=True)
    async with await Engine.open(None, shelly_dir=cluster.root / ".shelly", env=cluster.env()) as engine:
        sub = engine.bus.subscribe(buffer=100_000)
        session = engine.session(persist=False)
        send = asyncio.create_task(session.send(scenario.task))
        seen: list[Event] = []
        async with asyncio.timeout(60):
            while not open_when(seen):
                event = await sub.get()
                assert event is not None
                seen.append(event)
        await asyncio.to_thread(gate.touch)
        await send
        sub.close()
        return session.agent.chat.messages()


async def test_three_spawned_children_are_announced_once_before_the_leads_next_call_on_both(
        cluster: Cluster, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    scenario = Scenario(
        scripts={"lead": [spawn("a", "b", "c"),
                          {"tool_calls": [{"name": "spawn_status", "arguments": {}}], "until": str(gate)},
                          "all three heard"],
                 "worker": ["found {task}"]},
        agents=[LEAD, {"name": "worker"}])
    results = {}
    for runtime in ("embedded", "pool"):
        chat = await run_lead(cluster, scenario, runtime, gate, ended_workers(3))
        acks = [json.loads(m.tool_results()[0].content) for m in chat if m.role == Role.TOOL][:3]
        assert [a["status"] for a in acks] == ["accepted"] * 3, runtime
        last_call = max(i for i, m in enumerate(chat) if m.role == Role.ASSISTANT)
        assert len(announced(chat[:last_call])) == 3, runtime  # all heard before the last model call
        assert chat[-1].text_content() == "all three heard"
        status = [json.loads(m.tool_results()[0].content) for m in chat if m.role == Role.TOOL][3]
        assert sorted((r["agent"], r["state"], r["result"]) for r in status) == [
            ("worker", "completed", f"found {t}") for t in "abc"], runtime
        results[runtime] = announced(chat)
    assert results["embedded"] == results["pool"]
    assert results["pool"] == sorted(
        f'[Spawn result from agent "worker" (run: ID)]\n[Subagent "worker" completed in Ts (1 iterations)]:\n'
        f"found {t}" for t in "abc")


async def test_max_children_rejects_the_sixth_and_one_dedup_key_starts_one_run_on_both(
        cluster: Cluster, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    first = spawn(*"abcd")
    first["tool_calls"].append({"name": "spawn", "arguments": {"agent": "worker", "task": "x", "dedup_key": "k"}})
    second = {"tool_calls": [{"name": "spawn", "arguments": {"agent": "worker", "task": "y", "dedup_key": "k"}},
                             {"name": "spawn_status", "arguments": {}}]}
    scenario = Scenario(
        scripts={"lead": [first, second, spawn("f"), "waiting", *["done"] * 5],  # a step per wake-up
                 "worker": [{"text": "found {task}", "until": str(gate)}]},
        agents=[LEAD, {"name": "worker"}])
    seen = {}
    for runtime in ("embedded", "pool"):
        chat = await run_lead(cluster, scenario, runtime, gate, lead_calls_ended(8))
        results = [json.loads(m.tool_results()[0].content) for m in chat if m.role == Role.TOOL]
        status = results.pop(6)  # spawn_status while the five are held: none has ended
        assert len(status) == 5 and {r["state"] for r in status} <= {"queued", "running"}, runtime
        acks = results
        seen[runtime] = [(a["status"], a.get("error", "")) for a in acks]
        assert acks[5]["run_id"] == acks[4]["run_id"], runtime  # the same key: the same run
        assert len(announced(chat)) == 5, runtime
    assert seen["embedded"] == seen["pool"] == [("accepted", "")] * 6 + [
        ("rejected", "spawn: max_children 5 reached (5 running)")]


async def test_the_tree_usage_counts_a_spawned_child_on_both(cluster: Cluster) -> None:
    scenario = Scenario(scripts={"lead": [spawn("a"), "spawned it", "heard it"], "worker": ["found {task}"]},
                        agents=[LEAD, {"name": "worker"}])
    requests = {}
    for runtime in ("embedded", "pool"):
        write_team(cluster, scenario, runtime)
        if runtime == "pool":
            cluster.start_worker("w1")
        async with await Engine.open(None, shelly_dir=cluster.root / ".shelly", env=cluster.env()) as engine:
            outcome = await engine.session(persist=False).send(scenario.task)
        assert outcome.reply.text_content() == "heard it", runtime
        assert outcome.tree_usage is not None, runtime
        requests[runtime] = (outcome.usage.model_requests, outcome.tree_usage.model_requests)
    assert requests["embedded"] == requests["pool"] == (3, 4), "the lead's three calls and the spawned worker's one"
