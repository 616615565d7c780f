"""Delegation behaves the same embedded and on the pool: the same entries, the same endings and
event kinds of each child, the same tokens (DESIGN §6). Each scenario runs on both runtimes."""

from __future__ import annotations

import pytest

from .support import Cluster, Scenario, both, cluster, complete, delegate

__all__ = ["cluster"]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

LEAD = {"name": "lead", "options": {"max_delegation_depth": 1}}

CHILD_KINDS = {"run_started", "message_added", "tool_call_start", "tool_call_end", "delegation_progress",
               "run_finished"}
"""A child that reports with ``task_complete``: its life and its one tool call."""



async def test_a_fan_out_gives_the_same_entries_endings_events_and_tokens(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "fix the parser"},
                                   {"agent": "coder", "task": "write the docs"},
                                   {"agent": "tester", "task": "run the tests"}), "all three done"],
                 "coder": [complete("did {task}")], "tester": ["tests pass"]},
        agents=[LEAD, {"name": "coder"}, {"name": "tester"}])
    observed = await both(cluster, scenario)
    assert observed.endings == [("coder", "done"), ("coder", "done"), ("tester", "done")]
    assert observed.kinds["coder"] == CHILD_KINDS
    assert observed.kinds["tester"] == {"run_started", "message_added", "delegation_progress", "run_finished"}
    assert observed.tokens > 0 and observed.reply == "all three done"


async def test_a_child_whose_model_fails_is_a_failed_entry_with_the_same_reason(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "fix it"}), "noted"],
                 "coder": [{"error": "simulated outage"}]},
        agents=[LEAD, {"name": "coder"}])
    observed = await both(cluster, scenario)
    assert observed.endings == [("coder", "failed")]
    assert "simulated outage" in observed.entries[0][0]["error"]


async def test_fail_fast_cancels_the_slow_sibling_the_same_way(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "quick", "task": "fail now"}, {"agent": "slow", "task": "take long"}),
                          "noted"],
                 "quick": [{"error": "broken"}], "slow": [{"text": "late", "delay": 20}]},
        agents=[{"name": "lead", "options": {"max_delegation_depth": 1, "delegate_fail_fast": True}},
                {"name": "quick"}, {"name": "slow"}])
    observed = await both(cluster, scenario)
    assert observed.endings == [("quick", "failed"), ("slow", "canceled")]
    assert observed.entries[0][1] == {"agent": "slow", "error": "canceled: sibling failed"}


@pytest.mark.parametrize("concurrency", [8, 1], ids=["sibling-running", "sibling-queued"])
async def test_fail_fast_with_board_tasks_reports_and_settles_the_stopped_sibling_the_same_way(
        cluster: Cluster, concurrency: int) -> None:
    """The sibling stopped by a failure reports its start, its entry and its end and has its board
    task canceled on both, whether it was already running or still queued on the pool (issue 39: a
    queued one reported only ``run_finished`` and left its task ``pending``). One worker process
    (concurrency 1) takes ``quick`` first (sent first), so ``slow`` is stopped while queued."""
    scenario = Scenario(concurrency=concurrency,
        scripts={"lead": [delegate({"agent": "quick", "task": "fail now", "task_id": "task-quick"},
                                   {"agent": "slow", "task": "take long", "task_id": "task-slow"}), "noted"],
                 "quick": [{"error": "broken"}], "slow": [{"text": "late", "delay": 20}]},
        agents=[{"name": "lead", "options": {"max_delegation_depth": 1, "delegate_fail_fast": True}},
                {"name": "quick", "toolboxes": ["tasks"]}, {"name": "slow", "toolboxes": ["tasks"]}],
        board=["task-quick", "task-slow"])
    observed = await both(cluster, scenario)
    assert observed.endings == [("quick", "failed"), ("slow", "canceled")]
    assert observed.kinds["slow"] == {"run_started", "delegation_progress", "run_finished"}
    assert observed.board == {"task-quick": ("failed", "quick-fail-1"), "task-slow": ("canceled", "slow-take-1")}


async def test_a_handoff_runs_the_peer_as_the_same_entry_on_both(cluster: Cluster) -> None:
    handoff = {"tool_calls": [{"name": "handoff", "arguments": {
        "target_agent": "reviewer", "reason": "needs review", "context": "the parser change"}}]}
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "fix the parser"}), "done"],
                 "coder": [handoff, "handing off"], "reviewer": [complete("reviewed")]},
        agents=[LEAD, {"name": "coder", "options": {"max_handoffs": 2}}, {"name": "reviewer"}])
    observed = await both(cluster, scenario)
    assert observed.entries == [[{"agent": "coder", "result": "reviewed",
                                  "completion": {"status": "completed", "summary": "reviewed"}}]]
    assert observed.endings == [("coder", "done"), ("coder", "done")]  # the peer reports as the entry asked


async def test_max_concurrency_one_still_runs_every_instance_to_the_same_entries(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "part one"}, {"agent": "coder", "task": "part two"},
                                   {"agent": "coder", "task": "part three"}), "merged"],
                 "coder": [complete("did {task}")]},
        agents=[LEAD, {"name": "coder", "max_concurrency": 1}])
    observed = await both(cluster, scenario)
    assert [e["result"] for e in observed.entries[0]] == ["did part one", "did part two", "did part three"]


async def test_a_childs_own_limit_ends_it_with_the_same_synthetic_failed_completion(cluster: Cluster) -> None:
    call_a_tool = {"tool_calls": [{"name": "list_agents", "arguments": {}}]}
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "loop"}), "noted"],
                 "coder": [call_a_tool, call_a_tool, complete("never")]},
        agents=[LEAD, {"name": "coder", "limits": {"model_requests": 1},
                       "options": {"max_delegation_depth": 1}}, {"name": "other"}])
    observed = await both(cluster, scenario)
    entry = observed.entries[0][0]
    assert entry["completion"]["status"] == "failed"
    assert entry["completion"]["summary"] == ('Agent "coder" exhausted its model_requests budget '
                                              "without completing the task.")
    assert observed.endings == [("coder", "failed")]  # it raised: out of its budget


async def test_a_token_budget_effect_ends_a_child_the_same_way(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "talk"}), "noted"],
                 "coder": [{"tool_calls": [{"name": "list_agents", "arguments": {}}]}, complete("never")]},
        agents=[LEAD, {"name": "coder", "options": {"max_delegation_depth": 1},
                       "effects": [{"kind": "token_budget", "params": {"max_tokens": 1}}]}, {"name": "other"}])
    observed = await both(cluster, scenario)
    assert observed.entries[0][0]["completion"]["caveats"].startswith("Token budget exhausted")


async def test_a_child_that_delegates_reports_its_grandchild_the_same_way(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "mid", "task": "plan"}), "planned"],
                 "mid": [delegate({"agent": "leaf", "task": "detail"}), complete("planned with leaf")],
                 "leaf": [complete("detailed")]},
        agents=[{"name": "lead", "options": {"max_delegation_depth": 2}},
                {"name": "mid", "options": {"max_delegation_depth": 2}}, {"name": "leaf"}])
    observed = await both(cluster, scenario)
    assert observed.endings == [("leaf", "done"), ("mid", "done")]
    assert observed.kinds["mid"] >= {"run_started", "tool_call_start", "run_finished"}


async def test_a_child_claims_its_board_task_and_its_end_settles_it_the_same_way(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "fix the parser", "task_id": "task-parser"},
                                   {"agent": "coder", "task": "break the build", "task_id": "task-build"}),
                          "noted"],
                 "coder": [complete("did {task}")]},
        agents=[LEAD, {"name": "coder", "toolboxes": ["tasks"]}], board=["task-parser", "task-build"])
    scenario.scripts["coder"] = [complete("fixed")]
    observed = await both(cluster, scenario)
    assert observed.board == {"task-parser": ("completed", "coder-fix-1"), "task-build": ("completed", "coder-break-2")}


async def test_a_task_canceled_on_the_board_stops_its_child_the_same_way(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "fix the parser", "task_id": "task-parser"}), "noted"],
                 "coder": [{"text": "late", "delay": 30}]},
        agents=[LEAD, {"name": "coder", "toolboxes": ["tasks"]}], board=["task-parser"],
        cancel_when_claimed="task-parser")
    observed = await both(cluster, scenario)
    assert observed.entries == [[{"agent": "coder", "error": "task canceled"}]]
    assert observed.endings == [("coder", "canceled")]
    assert observed.board == {"task-parser": ("canceled", "coder-fix-1")}


async def test_a_refused_claim_is_the_entrys_error_on_both(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "fix the parser", "task_id": "task-missing"}), "noted"],
                 "coder": [complete("never")]},
        agents=[LEAD, {"name": "coder", "toolboxes": ["tasks"]}])
    observed = await both(cluster, scenario)
    assert observed.entries[0][0]["error"].startswith('failed to claim task "task-missing"')
    assert observed.endings == [("coder", "failed")]


async def test_a_blocking_childs_question_is_answered_from_its_context_the_same_way(cluster: Cluster) -> None:
    ask = {"tool_calls": [{"name": "request_input", "arguments": {"question": "Which file?"}}]}
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "fix it", "context": "the file is parser.py"}),
                          "noted"],
                 "coder": [ask, complete("fixed parser.py")]},
        agents=[LEAD, {"name": "coder"}])
    observed = await both(cluster, scenario)
    assert observed.entries[0][0]["result"] == "fixed parser.py"
    assert "tool_call_end" in observed.kinds["coder"]


async def test_a_failed_childs_reflection_is_shown_to_the_next_child_with_a_similar_task_on_both(
        cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "parse the config file"}),
                          delegate({"agent": "coder", "task": "parse the config file again"}), "gave up"],
                 "coder": [complete("could not parse it", status="failed")]},
        agents=[LEAD, {"name": "coder"}])
    observed = await both(cluster, scenario)
    first, second = observed.inputs  # sorted: the first child, shown no reflection, had fewer
    assert second > first + 20  # the second child was also shown the first one's <prior_reflections>


async def test_the_top_level_run_reports_its_start_and_end_like_every_run(cluster: Cluster) -> None:
    scenario = Scenario(scripts={"lead": [delegate({"agent": "coder", "task": "fix the parser"}), "done"],
                                 "coder": ["fixed"]},
                        agents=[LEAD, {"name": "coder"}])
    observed = await both(cluster, scenario)
    assert observed.root == [("run_started", ""), ("run_finished", "done")]
