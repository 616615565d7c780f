"""The child's life written once (agent/children.py): its begin/scope/end sequence, how a child's
end reads, and its run id."""

from __future__ import annotations

from shelly_dist.agent import ChildRequest, CompletionResult, DelegateEntry, Run
from shelly_dist.agent.children import (
    ChildLife,
    Ending,
    Stop,
    child_run_id,
    ending_of,
    peer_run_id,
    report,
    run_id_of,
)
from shelly_dist.agent.records import HandoffResult
from shelly_dist.agent.stops import DELEGATION_CLOSED, SIBLING_FAILED, TASK_CANCELED
from shelly_dist.events import Event

from .helpers import Team
from .test_delegate_board import FakeBoard


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


# -- ChildLife: the sequence both runtimes follow -------------------------------------------------


def life_of(board: FakeBoard | None = None, task_id: str = "task-1") -> tuple[ChildLife, Run, list[Event]]:
    """A fresh child (``coder``, named ``coder-task-1``) of ``lead`` with its board task, and what it reports."""
    team = Team()
    team.add("coder", ["done"])
    req = request().model_copy(update={"task_id": task_id})
    life = ChildLife(req, "root-c1", board=board, parent="lead")  # type: ignore[arg-type]
    seen: list[Event] = []
    agent = team.spawn("coder", 1)
    life.spawn(agent, 1, seen.append)
    return life, Run.start_child(agent, req, run_id="root-c1"), seen


async def test_a_child_begins_with_its_start_and_its_board_claim_and_ends_with_its_entry_then_its_finish():
    board = FakeBoard()
    life, run, seen = life_of(board)
    assert await life.begin(run, parent_run="root") is None
    end = await life.end(run, DelegateEntry(agent="coder", result="done"))
    for event in end.events:
        report(run, event)
    assert run.agent.name == "coder-task-1" and board.claims == [("task-1", "coder-task-1")]
    assert board.updates == [("task-1", "completed")]
    assert [e.kind for e in seen] == ["run_started", "delegation_progress", "run_finished"]
    assert end.ending == Ending.DONE and end.peer is None and end.entry.usage is not None


async def test_a_child_stopped_before_its_first_step_ends_canceled_and_settles_its_board_task():
    board = FakeBoard()
    life, run, _ = life_of(board)
    await life.begin(run, parent_run="root")
    end = await life.end(run, Stop(SIBLING_FAILED))
    assert end.ending == Ending.CANCELED and end.entry.error == SIBLING_FAILED
    assert board.updates == [("task-1", "canceled")]
    assert [e.kind for e in end.events] == ["delegation_progress", "run_finished"]


async def test_a_refused_claim_ends_the_child_failed_without_settling_a_task_that_is_not_its_own():
    board = FakeBoard(fail_claims=True)
    life, run, _ = life_of(board)
    refused = await life.begin(run, parent_run="root")
    assert refused is not None and refused.error.startswith('failed to claim task "task-1"')
    end = await life.end(run, refused)
    assert end.ending == Ending.FAILED and board.updates == [] and end.entry.usage is None


async def test_a_child_that_never_began_still_reports_its_end_under_its_agent():
    board = FakeBoard()
    life, _, _ = life_of(board)
    end = await life.end(None, DelegateEntry(agent="coder", error="config fingerprint mismatch"))
    assert end.ending == Ending.FAILED and board.updates == []
    assert [(e.kind, e.agent) for e in end.events] == [("delegation_progress", "coder"), ("run_finished", "coder")]


async def test_a_child_that_hands_off_ends_done_with_the_peer_and_leaves_the_board_task_to_it():
    team = Team()
    team.add("coder", ["x"])
    team.add("reviewer", ["y"])
    board = FakeBoard()
    req = request().model_copy(update={"task_id": "task-1"})
    life = ChildLife(req, "root-c1", board=board, parent="lead")  # type: ignore[arg-type]
    agent = team.spawn("coder", 1)
    agent.set_registry(team.registry)
    life.spawn(agent, 1, None)
    run = Run.start_child(agent, req, run_id="root-c1")
    await life.begin(run, parent_run="root")
    run.state.handoff = HandoffResult(target_agent="reviewer", reason="review", context="c")
    end = await life.end(run, DelegateEntry(agent="coder", result="x"))
    assert end.peer is not None and end.peer.spawned() == "reviewer" and end.ending == Ending.DONE
    assert board.updates == [] and [e.kind for e in end.events] == ["run_finished"]
    assert end.events[0].data["entry"] == {"agent": "coder", "handoff": "reviewer"}
