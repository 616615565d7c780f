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


async def test_max_concurrency_one_still_runs_every_instance_to_the_same_entries(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "part one"}, {"agent": "coder", "task": "part two"},
                                   {"agent": "coder", "task": "part three"}), "merged"],
                 "coder": [complete("did {task}")]},
        agents=[LEAD, {"name": "coder", "max_concurrency": 1}])
    embedded, pool = await both(cluster, scenario)
    assert embedded == pool
    assert [e["result"] for e in embedded.entries[0]] == ["did part one", "did part two", "did part three"]


async def test_a_childs_own_limit_ends_it_with_the_same_synthetic_failed_completion(cluster: Cluster) -> None:
    call_a_tool = {"tool_calls": [{"name": "list_agents", "arguments": {}}]}
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "loop"}), "noted"],
                 "coder": [call_a_tool, call_a_tool, complete("never")]},
        agents=[LEAD, {"name": "coder", "limits": {"model_requests": 1},
                       "options": {"max_delegation_depth": 1}}, {"name": "other"}])
    embedded, pool = await both(cluster, scenario)
    assert embedded == pool
    entry = embedded.entries[0][0]
    assert entry["completion"]["status"] == "failed"
    assert entry["completion"]["summary"] == ('Agent "coder" exhausted its model_requests budget '
                                              "without completing the task.")
    assert embedded.endings == [("coder", "failed")]  # it raised: out of its budget


async def test_a_token_budget_effect_ends_a_child_the_same_way(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "talk"}), "noted"],
                 "coder": [{"tool_calls": [{"name": "list_agents", "arguments": {}}]}, complete("never")]},
        agents=[LEAD, {"name": "coder", "options": {"max_delegation_depth": 1},
                       "effects": [{"kind": "token_budget", "params": {"max_tokens": 1}}]}, {"name": "other"}])
    embedded, pool = await both(cluster, scenario)
    assert embedded == pool
    assert embedded.entries[0][0]["completion"]["caveats"].startswith("Token budget exhausted")


async def test_a_child_that_delegates_reports_its_grandchild_the_same_way(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "mid", "task": "plan"}), "planned"],
                 "mid": [delegate({"agent": "leaf", "task": "detail"}), complete("planned with leaf")],
                 "leaf": [complete("detailed")]},
        agents=[{"name": "lead", "options": {"max_delegation_depth": 2}},
                {"name": "mid", "options": {"max_delegation_depth": 2}}, {"name": "leaf"}])
    embedded, pool = await both(cluster, scenario)
    assert embedded == pool
    assert embedded.endings == [("leaf", "done"), ("mid", "done")]
    assert embedded.kinds["mid"] >= {"run_started", "tool_call_start", "run_finished"}


async def test_a_child_claims_its_board_task_and_its_end_settles_it_the_same_way(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "fix the parser", "task_id": "task-parser"},
                                   {"agent": "coder", "task": "break the build", "task_id": "task-build"}),
                          "noted"],
                 "coder": [complete("did {task}")]},
        agents=[LEAD, {"name": "coder", "toolboxes": ["tasks"]}], board=["task-parser", "task-build"])
    scenario.scripts["coder"] = [complete("fixed")]
    embedded, pool = await both(cluster, scenario)
    assert embedded == pool
    assert embedded.board == {"task-parser": ("completed", "coder-fix-1"), "task-build": ("completed", "coder-break-2")}


async def test_a_task_canceled_on_the_board_stops_its_child_the_same_way(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "fix the parser", "task_id": "task-parser"}), "noted"],
                 "coder": [{"text": "late", "delay": 30}]},
        agents=[LEAD, {"name": "coder", "toolboxes": ["tasks"]}], board=["task-parser"],
        cancel_when_claimed="task-parser")
    embedded, pool = await both(cluster, scenario)
    assert embedded.entries == pool.entries and embedded.endings == pool.endings and embedded.board == pool.board
    assert embedded.entries == [[{"agent": "coder", "error": "task canceled"}]]
    assert embedded.endings == [("coder", "canceled")]
    assert embedded.board == {"task-parser": ("canceled", "coder-fix-1")}


async def test_a_refused_claim_is_the_entrys_error_on_both(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "fix the parser", "task_id": "task-missing"}), "noted"],
                 "coder": [complete("never")]},
        agents=[LEAD, {"name": "coder", "toolboxes": ["tasks"]}])
    embedded, pool = await both(cluster, scenario)
    assert embedded == pool
    assert embedded.entries[0][0]["error"].startswith('failed to claim task "task-missing"')
    assert embedded.endings == [("coder", "failed")]


async def test_a_blocking_childs_question_is_answered_from_its_context_the_same_way(cluster: Cluster) -> None:
    ask = {"tool_calls": [{"name": "request_input", "arguments": {"question": "Which file?"}}]}
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "fix it", "context": "the file is parser.py"}),
                          "noted"],
                 "coder": [ask, complete("fixed parser.py")]},
        agents=[LEAD, {"name": "coder"}])
    embedded, pool = await both(cluster, scenario)
    assert embedded == pool
    assert embedded.entries[0][0]["result"] == "fixed parser.py"
    assert "tool_call_end" in embedded.kinds["coder"]


async def test_a_failed_childs_reflection_is_shown_to_the_next_child_with_a_similar_task_on_both(
        cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "parse the config file"}),
                          delegate({"agent": "coder", "task": "parse the config file again"}), "gave up"],
                 "coder": [complete("could not parse it", status="failed")]},
        agents=[LEAD, {"name": "coder"}])
    embedded, pool = await both(cluster, scenario)
    assert embedded == pool
    first, second = embedded.inputs  # sorted: the first child, shown no reflection, had fewer
    assert second > first + 20  # the second child was also shown the first one's <prior_reflections>
