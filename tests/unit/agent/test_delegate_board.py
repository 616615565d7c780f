"""The task-board coupling of delegate (behaviours 38–41)."""

from __future__ import annotations

import asyncio
import json

from shelly_dist import Role

from .helpers import Team, complete, delegate


class FakeBoard:
    """Records claims and status updates; ``cancel`` makes ``wait_canceled`` return."""

    def __init__(self, *, fail_updates: bool = False, fail_claims: bool = False) -> None:
        self.claims: list[tuple[str, str]] = []
        self.updates: list[tuple[str, str]] = []
        self.fail_updates = fail_updates
        self.fail_claims = fail_claims
        self.canceled: dict[str, asyncio.Event] = {}

    async def claim(self, task_id: str, agent: str) -> None:
        if self.fail_claims:
            raise RuntimeError("already assigned to someone")
        self.claims.append((task_id, agent))

    async def update_status(self, task_id: str, status: str) -> None:
        if self.fail_updates:
            raise RuntimeError("board offline")
        self.updates.append((task_id, status))

    async def wait_canceled(self, task_id: str) -> None:
        await self.canceled.setdefault(task_id, asyncio.Event()).wait()

    def cancel(self, task_id: str) -> None:
        self.canceled.setdefault(task_id, asyncio.Event()).set()


def output(agent) -> list[dict]:
    return json.loads(next(m for m in agent.chat.messages() if m.role == Role.TOOL).tool_results()[0].content)


def lead_with(team: Team, board: FakeBoard, *tasks: dict) -> object:
    team.add("lead", [delegate(*tasks), "ok"], max_delegation_depth=1)
    lead = team.spawn("lead")
    lead.options.task_board = board
    return lead


async def test_task_id_is_claimed_by_the_child_instance_and_completed_once():
    board, team = FakeBoard(), Team()
    team.add("worker", [complete("done")])
    lead = lead_with(team, board, {"agent": "worker", "task": "t", "task_id": "task-1"})
    await lead.run("go")
    assert len(board.claims) == 1 and board.claims[0][1].startswith("worker-")
    assert board.updates == [("task-1", "completed")]


async def test_failed_completion_moves_the_task_to_failed():
    board, team = FakeBoard(), Team()
    team.add("worker", [complete("could not", status="failed")])
    await lead_with(team, board, {"agent": "worker", "task": "t", "task_id": "task-1"}).run("go")
    assert board.updates == [("task-1", "failed")]


async def test_concurrent_tasks_claim_and_update_independently():
    board, team = FakeBoard(), Team()
    team.add("worker", [complete("done")])
    await lead_with(team, board, {"agent": "worker", "task": "a", "task_id": "task-a"},
                    {"agent": "worker", "task": "b", "task_id": "task-b"}).run("go")
    assert sorted(t for t, _ in board.claims) == ["task-a", "task-b"]
    assert sorted(board.updates) == [("task-a", "completed"), ("task-b", "completed")]


async def test_child_ending_without_task_complete_completes_the_task_without_warning():
    board, team = FakeBoard(), Team()
    team.add("worker", ["just text"])
    lead = lead_with(team, board, {"agent": "worker", "task": "t", "task_id": "task-1"})
    await lead.run("go")
    assert board.updates == [("task-1", "completed")]
    assert "warning" not in output(lead)[0]


async def test_task_id_without_a_board_is_ignored():
    team = Team()
    team.add("worker", [complete("done")])
    team.add("lead", [delegate({"agent": "worker", "task": "t", "task_id": "task-1"}), "ok"], max_delegation_depth=1)
    lead = team.spawn("lead")
    await lead.run("go")
    assert output(lead)[0]["result"] == "done"


async def test_child_error_moves_the_task_to_failed():
    board, team = FakeBoard(), Team()
    team.add("worker", [{"error": "exploded"}])
    lead = lead_with(team, board, {"agent": "worker", "task": "t", "task_id": "task-1"})
    await lead.run("go")
    assert "exploded" in output(lead)[0]["error"]
    assert board.updates == [("task-1", "failed")]


async def test_failed_claim_fails_the_entry_and_the_child_never_runs():
    board, team = FakeBoard(fail_claims=True), Team()
    team.add("worker", [complete("done")])
    lead = lead_with(team, board, {"agent": "worker", "task": "t", "task_id": "task-1"})
    await lead.run("go")
    assert output(lead)[0]["error"].startswith('failed to claim task "task-1"')
    assert team.requests("worker") == []


async def test_failing_board_update_becomes_a_warning_not_an_error():
    board, team = FakeBoard(fail_updates=True), Team()
    team.add("worker", [complete("done")])
    lead = lead_with(team, board, {"agent": "worker", "task": "t", "task_id": "task-1"})
    await lead.run("go")
    entry = output(lead)[0]
    assert "error" not in entry and entry["result"] == "done"
    assert "task board update failed" in entry["warning"] and "board offline" in entry["warning"]


async def test_failing_board_update_on_exhaustion_keeps_the_completion():
    board, team = FakeBoard(fail_updates=True), Team()
    team.add("worker", [{"tool_calls": [{"name": "noop", "arguments": {}}]}], repeat_last=True, max_iterations=1)
    lead = lead_with(team, board, {"agent": "worker", "task": "t", "task_id": "task-1"})
    await lead.run("go")
    entry = output(lead)[0]
    assert entry["completion"]["status"] == "failed" and "task board update failed" in entry["warning"]


async def test_cancelling_the_task_on_the_board_stops_the_child():
    board, team = FakeBoard(), Team()
    started = asyncio.Event()

    async def never(messages, tools):
        started.set()
        await asyncio.Event().wait()

    from shelly_dist import Agent, FunctionCompleter

    team.registry.register("worker", "w", lambda: Agent("worker", completer=FunctionCompleter(never)))
    lead = lead_with(team, board, {"agent": "worker", "task": "t", "task_id": "task-1"})
    run = asyncio.create_task(lead.run("go"))
    await asyncio.wait_for(started.wait(), 10)
    board.cancel("task-1")
    await asyncio.wait_for(run, 10)
    assert output(lead)[0] == {"agent": "worker", "error": "task canceled"}
    assert board.updates[-1] == ("task-1", "canceled")
