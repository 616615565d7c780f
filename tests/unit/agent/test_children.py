"""The child's life written once (agent/children.py): how a child's end reads, and its run id."""

from __future__ import annotations

from shelly_dist.agent import ChildRequest, CompletionResult, DelegateEntry
from shelly_dist.agent.children import Ending, child_run_id, ending_of, peer_run_id, run_id_of
from shelly_dist.agent.stops import DELEGATION_CLOSED, SIBLING_FAILED, TASK_CANCELED


def request(key: str = "call_1:0", handoffs: int = 0) -> ChildRequest:
    return ChildRequest(key=key, tool_call_id="call_1", index=0, agent="coder", task="t", context="", depth=1,
                        visited=["lead", "coder"], parent_run_id="root", parent_agent="lead", handoffs=handoffs)


def test_a_stopped_child_ends_canceled_whatever_stopped_it():
    for reason in (TASK_CANCELED, SIBLING_FAILED, DELEGATION_CLOSED):
        assert ending_of(DelegateEntry(agent="coder", error=reason)) == Ending.CANCELED


def test_an_error_or_a_raised_run_ends_failed_a_reported_failure_ends_done():
    assert ending_of(DelegateEntry(agent="coder", error="model refused")) == Ending.FAILED
    synthetic = DelegateEntry(agent="coder", result="x", completion=CompletionResult(status="failed", summary="x"))
    assert ending_of(synthetic, raised=True) == Ending.FAILED  # out of its budget
    assert ending_of(synthetic) == Ending.DONE  # it called task_complete with failed


def test_a_childs_run_id_is_its_parents_plus_a_digest_of_the_step_and_call():
    first = child_run_id("root", request(), 1)
    assert first == child_run_id("root", request(), 1) == run_id_of("root", "1:call_1:0")
    assert first.startswith("root-") and len(first) == len("root-") + 8
    assert child_run_id("root", request(), 2) != first
    assert peer_run_id(first, request(handoffs=1)) == f"{first}-h1"
