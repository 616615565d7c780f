"""Delegation behaves the same embedded and on the pool: the same entries, the same endings and
event kinds of each child, the same tokens (DESIGN §6). Each scenario runs on both runtimes."""

from __future__ import annotations

import pytest

from .support import Cluster, Observed, Scenario, cluster, complete, delegate, observe

__all__ = ["cluster"]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

LEAD = {"name": "lead", "options": {"max_delegation_depth": 1}}

CHILD_KINDS = {"run_started", "message_added", "tool_call_start", "tool_call_end", "delegation_progress",
               "run_finished"}
"""A child that reports with ``task_complete``: its life and its one tool call."""


async def both(cluster: Cluster, scenario: Scenario) -> tuple[Observed, Observed]:
    """The scenario observed embedded, then on the pool (same project, same scripts)."""
    return await observe(cluster, scenario, "embedded"), await observe(cluster, scenario, "pool")


async def test_a_fan_out_gives_the_same_entries_endings_events_and_tokens(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "fix the parser"},
                                   {"agent": "coder", "task": "write the docs"},
                                   {"agent": "tester", "task": "run the tests"}), "all three done"],
                 "coder": [complete("did {task}")], "tester": ["tests pass"]},
        agents=[LEAD, {"name": "coder"}, {"name": "tester"}])
    embedded, pool = await both(cluster, scenario)
    assert embedded == pool
    assert embedded.endings == [("coder", "done"), ("coder", "done"), ("tester", "done")]
    assert embedded.kinds["coder"] == CHILD_KINDS
    assert embedded.kinds["tester"] == {"run_started", "message_added", "delegation_progress", "run_finished"}
    assert embedded.tokens > 0 and embedded.reply == "all three done"


async def test_a_child_whose_model_fails_is_a_failed_entry_with_the_same_reason(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "fix it"}), "noted"],
                 "coder": [{"error": "simulated outage"}]},
        agents=[LEAD, {"name": "coder"}])
    embedded, pool = await both(cluster, scenario)
    assert embedded == pool
    assert embedded.endings == [("coder", "failed")]
    assert "simulated outage" in embedded.entries[0][0]["error"]


async def test_fail_fast_cancels_the_slow_sibling_the_same_way(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "quick", "task": "fail now"}, {"agent": "slow", "task": "take long"}),
                          "noted"],
                 "quick": [{"error": "broken"}], "slow": [{"text": "late", "delay": 20}]},
        agents=[{"name": "lead", "options": {"max_delegation_depth": 1, "delegate_fail_fast": True}},
                {"name": "quick"}, {"name": "slow"}])
    embedded, pool = await both(cluster, scenario)
    assert embedded.entries == pool.entries and embedded.endings == pool.endings
    assert embedded.endings == [("quick", "failed"), ("slow", "canceled")]
    assert embedded.entries[0][1] == {"agent": "slow", "error": "canceled: sibling failed"}


async def test_a_handoff_runs_the_peer_as_the_same_entry_on_both(cluster: Cluster) -> None:
    handoff = {"tool_calls": [{"name": "handoff", "arguments": {
        "target_agent": "reviewer", "reason": "needs review", "context": "the parser change"}}]}
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "fix the parser"}), "done"],
                 "coder": [handoff, "handing off"], "reviewer": [complete("reviewed")]},
        agents=[LEAD, {"name": "coder", "options": {"max_handoffs": 2}}, {"name": "reviewer"}])
    embedded, pool = await both(cluster, scenario)
    assert embedded == pool
    assert embedded.entries == [[{"agent": "coder", "result": "reviewed",
                                  "completion": {"status": "completed", "summary": "reviewed"}}]]
    assert embedded.endings == [("coder", "done"), ("coder", "done")]  # the peer reports as the entry asked
