"""Interactive delegation embedded (behaviour 52, ``interaction_registry_test.go``): children ask,
the parent's model answers with ``answer_delegation_questions``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from shelly_dist.agent import Agent
from shelly_dist.agent.interactive import ANSWER_TOOL, NOT_ENABLED, answer_tool, go_duration
from shelly_dist.agent.records import ChildRequest
from shelly_dist.chats import Role
from shelly_dist.errors import AgentError
from shelly_dist.events import Event
from shelly_dist.runtime.local.interactive import LiveChild, LiveChildren

from .helpers import Team, call, complete
from .test_delegate_board import FakeBoard

INTERACTIVE = {"max_delegation_depth": 1, "interaction_mode": "interactive"}


def ask_parent(question: str) -> dict[str, Any]:
    return call("request_input", {"question": question})


def interactive(*agents: str) -> dict[str, Any]:
    return call("delegate", {"tasks": [{"agent": a, "task": f"{a} task", "context": "ctx", "mode": "interactive"}
                                       for a in agents]})


def answer(*pairs: tuple[str, str]) -> dict[str, Any]:
    return call(ANSWER_TOOL, {"answers": [{"delegation_id": d, "answer": a} for d, a in pairs]})


async def run_lead(team: Team) -> tuple[list[str], list[Event]]:
    """Run ``lead``; its tool results in order, and every event."""
    lead = team.spawn("lead")
    seen: list[Event] = []
    lead.options.on_event = seen.append
    await lead.run("go")
    results = [r.content for m in lead.chat.messages() if m.role == Role.TOOL for r in m.tool_results()]
    return results, seen


async def test_an_interactive_child_that_asks_returns_its_delegation_id_and_question():
    team = Team()
    team.add("worker", [ask_parent("What API?"), complete("used REST")])
    team.add("lead", [interactive("worker"), answer(("d-1", "REST")), "all done"], **INTERACTIVE)
    results, _ = await run_lead(team)
    first = json.loads(results[0])
    assert first == [{"agent": "worker", "delegation_id": "d-1",
                      "pending_question": {"id": "q-1", "agent": first[0]["pending_question"]["agent"],
                                           "content": "What API?"}}]
    assert first[0]["pending_question"]["agent"].startswith("worker-")


async def test_answering_lets_the_child_finish_and_its_result_comes_back():
    team = Team()
    team.add("worker", [ask_parent("What API?"), complete("used REST")])
    team.add("lead", [interactive("worker"), answer(("d-1", "REST")), "all done"], **INTERACTIVE)
    results, _ = await run_lead(team)
    assert json.loads(results[1]) == [
        {"agent": "worker", "result": "used REST", "completion": {"status": "completed", "summary": "used REST"}}]
    child_chat = team.requests("worker")[1].messages
    assert [r.content for m in child_chat if m.role == Role.TOOL for r in m.tool_results()] == ["REST"]


async def test_a_follow_up_question_comes_back_from_the_answer():
    team = Team()
    team.add("worker", [ask_parent("What API?"), ask_parent("What format?"), complete("done")])
    team.add("lead", [interactive("worker"), answer(("d-1", "REST")), answer(("d-1", "JSON")), "ok"],
             **INTERACTIVE)
    results, _ = await run_lead(team)
    follow_up = json.loads(results[1])
    assert follow_up[0]["delegation_id"] == "d-1"
    assert follow_up[0]["pending_question"]["id"] == "q-2"
    assert follow_up[0]["pending_question"]["content"] == "What format?"
    assert json.loads(results[2])[0]["result"] == "done"


async def test_a_child_that_never_asks_returns_its_result_without_a_delegation_id():
    team = Team()
    team.add("worker", ["done without asking"])
    team.add("lead", [interactive("worker"), "ok"], **INTERACTIVE)
    results, _ = await run_lead(team)
    assert json.loads(results[0]) == [{"agent": "worker", "result": "done without asking"}]


async def test_in_a_mixed_pair_one_entry_has_a_question_and_the_other_a_result():
    team = Team()
    team.add("asker", [ask_parent("What API?"), complete("asked")])
    team.add("quick", ["done fast"])
    team.add("lead", [interactive("asker", "quick"), answer(("d-1", "REST")), "ok"], **INTERACTIVE)
    results, _ = await run_lead(team)
    asked, quick = json.loads(results[0])
    assert asked["delegation_id"] == "d-1" and asked["pending_question"]["content"] == "What API?"
    assert quick == {"agent": "quick", "result": "done fast"}


async def test_interactive_mode_without_interactive_config_is_refused():
    team = Team()
    team.add("worker", ["x"])
    team.add("lead", [interactive("worker"), "ok"], max_delegation_depth=1)
    results, _ = await run_lead(team)
    assert results == ["delegate: interactive mode requires interaction_mode: interactive in config"]
    assert team.requests("worker") == []


async def test_a_stalled_child_past_question_timeout_is_an_entry_error_naming_the_timeout():
    stalled = asyncio.Event()

    class Stall:
        name = "stall"
        requests: list[Any] = []

        async def complete(self, chat: Any, tools: Any) -> Any:
            stalled.set()
            await asyncio.Event().wait()

    team = Team()
    team.add("lead", [interactive("slow"), "ok"], question_timeout=0.1, **INTERACTIVE)
    team.registry.register("slow", "slow", lambda: Agent("slow", completer=Stall()))  # type: ignore[arg-type]
    results, _ = await run_lead(team)
    assert json.loads(results[0]) == [
        {"agent": "slow", "error": "question timeout (100ms) exceeded for delegation d-1"}]
    assert stalled.is_set()


async def test_answering_an_unknown_delegation_is_an_error():
    team = Team()
    team.add("lead", [answer(("d-999", "test")), "ok"], **INTERACTIVE)
    results, _ = await run_lead(team)
    assert results == ['answer_delegation_questions: delegation "d-999" not found']


async def test_every_id_is_checked_before_any_answer_is_sent():
    team = Team()
    team.add("worker", [ask_parent("What API?"), complete("finished")])
    team.add("lead", [interactive("worker"), answer(("d-1", "REST"), ("d-7", "x")), answer(("d-1", "REST")), "ok"],
             **INTERACTIVE)
    results, _ = await run_lead(team)
    assert results[1] == 'answer_delegation_questions: delegation "d-7" not found'
    assert json.loads(results[2])[0]["result"] == "finished"  # the first call sent nothing to d-1


async def test_an_empty_answer_list_is_an_empty_array():
    team = Team()
    team.add("lead", [answer(), "ok"], **INTERACTIVE)
    results, _ = await run_lead(team)
    assert results == ["[]"]


async def test_answering_with_interactive_delegation_off_is_not_enabled():
    with pytest.raises(AgentError, match="answer_delegation_questions: interactive delegation not enabled"):
        await answer_tool().handler(json.dumps({"answers": [{"delegation_id": "d-1", "answer": "x"}]}))
    assert NOT_ENABLED == "answer_delegation_questions: interactive delegation not enabled"


async def test_the_answer_tool_and_protocol_are_offered_only_in_interactive_mode():
    team = Team()
    team.add("worker", ["x"])
    team.add("on", ["ok"], **INTERACTIVE)
    team.add("off", ["ok"], max_delegation_depth=1)
    for name, offered in (("on", True), ("off", False)):
        agent = team.spawn(name)
        await agent.run("go")
        assert (ANSWER_TOOL in team.requests(name)[0].tool_names) is offered
        assert ("<interactive_delegation_protocol>" in agent.chat.system_prompt()) is offered


async def test_children_still_waiting_are_cancelled_when_the_parent_run_ends():
    cancelled = asyncio.Event()
    team = Team()
    team.add("lead", [interactive("worker"), "I will not answer"], **INTERACTIVE)
    team.add("worker", [ask_parent("What API?"), complete("never")])
    lead = team.spawn("lead")
    real_close = LiveChild.cancel

    async def spy(self: LiveChild) -> None:
        await real_close(self)
        assert self.task is not None and self.task.result().error == "context canceled"
        cancelled.set()

    LiveChild.cancel = spy  # type: ignore[method-assign]
    try:
        assert (await lead.run("go")).text_content() == "I will not answer"
    finally:
        LiveChild.cancel = real_close  # type: ignore[method-assign]
    assert cancelled.is_set()
    assert len(team.requests("worker")) == 1  # it never got an answer


def _request(did: str) -> ChildRequest:
    return ChildRequest(key="c:0", tool_call_id="c", index=0, agent="w", task="t", depth=1, visited=[],
                        parent_run_id="p", parent_agent="lead", delegation_id=did)


async def test_double_registration_is_rejected():
    live = LiveChildren()
    live.register("d-1", LiveChild(_request("d-1")))
    with pytest.raises(AgentError, match='delegation "d-1" already registered'):
        live.register("d-1", LiveChild(_request("d-1")))


async def test_close_cancels_every_pending_child_and_can_be_called_twice():
    live = LiveChildren()
    children = [LiveChild(_request(f"d-{i}")) for i in (1, 2)]
    for c in children:
        live.register(c.request.delegation_id, c)
        c.start(lambda: asyncio.Event().wait())  # type: ignore[arg-type, return-value]
    await live.close()
    await live.close()
    assert all(c.task is not None and c.task.cancelled() for c in children)
    assert live.get("d-1") is None


def test_timeouts_are_printed_as_go_durations():
    assert [go_duration(s) for s in (0.1, 1.5, 300, 90, 3600, 0)] == ["100ms", "1.5s", "5m0s", "1m30s", "1h0m0s",
                                                                      "0s"]


def _on_board(*agents: str, task_id: str = "task-1") -> dict[str, Any]:
    return call("delegate", {"tasks": [{"agent": a, "task": f"{a} task", "context": "ctx", "mode": "interactive",
                                        "task_id": task_id} for a in agents]})


async def test_a_waiting_child_cancelled_by_its_parents_end_moves_its_board_task_to_failed():
    # Shelly: the delegation's own context is canceled, so runChildWithHandoff takes its generic
    # error branch ("context canceled", the task failed), not the board's "task canceled".
    board, team = FakeBoard(), Team()
    team.add("lead", [_on_board("worker"), "I will not answer"], **INTERACTIVE)
    team.add("worker", [ask_parent("What API?"), complete("never")])
    lead = team.spawn("lead")
    lead.options.task_board = board
    await lead.run("go")
    assert board.updates == [("task-1", "failed")]


async def test_a_child_past_question_timeout_moves_its_board_task_to_failed():
    class Stall:
        name = "stall"
        requests: list[Any] = []

        async def complete(self, chat: Any, tools: Any) -> Any:
            await asyncio.Event().wait()

    board, team = FakeBoard(), Team()
    team.add("lead", [_on_board("slow"), "ok"], question_timeout=0.1, **INTERACTIVE)
    team.registry.register("slow", "slow", lambda: Agent("slow", completer=Stall()))  # type: ignore[arg-type]
    lead = team.spawn("lead")
    lead.options.task_board = board
    await lead.run("go")
    assert board.updates == [("task-1", "failed")]


async def test_a_child_waiting_for_its_answer_gives_back_its_max_concurrency_slot():
    # As on the pool (a waiting run holds no slot): with one slot, the second child can only start
    # and ask in the same round if the first gives its slot back while it waits for the answer.
    team = Team()
    team.add("asker", [ask_parent("What API?"), complete("done")], max_concurrency=1)
    team.add("lead", [interactive("asker", "asker"), answer(("d-1", "REST"), ("d-2", "gRPC")), "ok"],
             question_timeout=5, **INTERACTIVE)
    results, _ = await run_lead(team)
    assert [e.get("pending_question", {}).get("content") for e in json.loads(results[0])] == ["What API?"] * 2
    assert [e["result"] for e in json.loads(results[1])] == ["done", "done"]
