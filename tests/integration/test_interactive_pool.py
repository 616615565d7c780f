"""Interactive delegation on the pool (behaviour 52 on real workers and real Redis): a child that
asks waits suspended, holding no worker; the parent's model answers with
``answer_delegation_questions`` on any worker; children still waiting when the parent ends are
cancelled."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from shelly_dist.redisio.keys import Keys
from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply

from .cluster import Cluster, complete, scripted, wait_until
from .test_handoff import board_status, board_task_in_a_second_turn, delegate_all, run_json

pytestmark = pytest.mark.integration

INTERACTIVE = {"interaction_mode": "interactive"}


def interactive(*agents: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "delegate", "arguments": {"tasks": [
        {"agent": a, "task": f"{a} task", "context": "ctx", "mode": "interactive"} for a in agents]}}]}


def answer(delegation_id: str, text: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "answer_delegation_questions",
                            "arguments": {"answers": [{"delegation_id": delegation_id, "answer": text}]}}]}


def ask_parent(question: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "request_input", "arguments": {"question": question}}]}


def tool_results(cluster: Cluster, run_id: str) -> list[str]:
    msgs = [json.loads(m) for m in cluster.redis.lrange(Keys(cluster.prefix).run_msgs(run_id), 0, -1)]
    return [p["content"] for m in msgs if m["role"] == "tool" for p in m["parts"]]


def root_tool_results(cluster: Cluster, session: str) -> list[str]:
    """The root's tool results as its ``message_added`` events carry them (a coordinator's run
    journals no messages)."""
    root = next(r for r in cluster.runs(session) if r["depth"] == "0")
    return [e["data"]["text"] for e in cluster.events(session)
            if e["run_id"] == root["id"] and e["kind"] == "message_added" and e["data"]["role"] == "tool"]


def run_of(cluster: Cluster, session: str, agent: str) -> dict[str, str]:
    return next(r for r in cluster.runs(session) if r["agent"] == agent)


def run_through_mid(cluster: Cluster, *, mid: list[Any], asker: list[Any]) -> dict[str, Any]:
    """Run lead -> mid (a worker run, interactive) -> asker on one worker slot; ``run``'s JSON."""
    cluster.write_config(
        [scripted(lead=[delegate_all(("mid", "plan it")), "lead done"], mid=mid, asker=asker)],
        [{"name": "lead", "options": {"max_delegation_depth": 2}},
         {"name": "mid", "options": {"max_delegation_depth": 2, **INTERACTIVE}},
         {"name": "asker"}],
    )
    cluster.start_worker("solo", concurrency=1)
    return run_json(cluster, "go")


def test_a_child_waits_suspended_while_its_parent_on_the_one_worker_slot_answers_it(cluster: Cluster):
    # lead -> mid (a worker run) -> asker, interactively. With one slot, mid can only be resumed to
    # read the question and answer it if the waiting asker holds no slot.
    out = run_through_mid(cluster, mid=[interactive("asker"), answer("d-1", "REST"), complete("mid done")],
                          asker=[ask_parent("What API?"), complete("used REST")])
    assert out["reply"] == "lead done"
    mid, asker = run_of(cluster, out["session"], "mid"), run_of(cluster, out["session"], "asker")
    asked, finished = (json.loads(r) for r in tool_results(cluster, mid["id"])[:2])
    assert asked == [{"agent": "asker", "delegation_id": "d-1",
                      "pending_question": {"id": "q-1", "agent": asker["instance"], "content": "What API?"}}]
    assert finished == [{"agent": "asker", "result": "used REST",
                         "completion": {"status": "completed", "summary": "used REST"}}]
    assert tool_results(cluster, asker["id"])[0] == "REST"
    assert asker["status"] == "done" and mid["status"] == "done"


def test_a_root_parent_gets_a_question_and_a_result_from_a_mixed_pair_and_answers_it(cluster: Cluster):
    cluster.write_config(
        [scripted(lead=[interactive("asker", "quick"), answer("d-1", "blue"), "lead done"],
                  asker=[ask_parent("Which colour?"), complete("painted")], quick=["done fast"])],
        [{"name": "lead", "options": {"max_delegation_depth": 1, **INTERACTIVE}}, {"name": "asker"},
         {"name": "quick"}],
    )
    cluster.start_worker("solo", concurrency=1)
    out = run_json(cluster, "go")
    assert out["reply"] == "lead done"
    first, second = (json.loads(r) for r in root_tool_results(cluster, out["session"]))
    assert first[0]["delegation_id"] == "d-1" and first[0]["pending_question"]["content"] == "Which colour?"
    assert first[1] == {"agent": "quick", "result": "done fast"}
    assert second == [{"agent": "asker", "result": "painted",
                       "completion": {"status": "completed", "summary": "painted"}}]


def test_a_child_still_waiting_when_its_parent_ends_is_cancelled(cluster: Cluster):
    cluster.write_config(
        [scripted(lead=[interactive("asker"), "not answering"],
                  asker=[ask_parent("Which colour?"), complete("never")])],
        [{"name": "lead", "options": {"max_delegation_depth": 1, **INTERACTIVE}}, {"name": "asker"}],
    )
    cluster.start_worker("solo", concurrency=1)
    out = run_json(cluster, "go")
    assert out["reply"] == "not answering"
    asker = wait_until(lambda: (r := run_of(cluster, out["session"], "asker"))["status"] == "canceled" and r,
                       60, "the waiting child canceled")
    record = cluster.redis.hgetall(Keys(cluster.prefix).run(asker["id"]))
    assert json.loads(record["result"])["error"] == "context canceled"


def test_a_child_still_waiting_when_its_worker_run_parent_ends_is_cancelled(cluster: Cluster):
    # mid is itself a delegated child run by a worker: its end (not a coordinator's) must stop the
    # interactive child it never answered.
    out = run_through_mid(cluster, mid=[interactive("asker"), complete("mid done without answering")],
                          asker=[ask_parent("Which colour?"), complete("never")])
    assert out["reply"] == "lead done"
    assert run_of(cluster, out["session"], "mid")["status"] == "done"
    asker = wait_until(lambda: (r := run_of(cluster, out["session"], "asker"))["status"] == "canceled" and r,
                       60, "the waiting child canceled")
    assert json.loads(cluster.redis.hget(Keys(cluster.prefix).run(asker["id"]), "result"))["error"] == \
        "context canceled"


def test_a_child_that_neither_asks_nor_ends_within_question_timeout_is_an_entry_error(cluster: Cluster):
    # The child waits on the user (ask_user), which nobody answers: its parent's question_timeout
    # ends the round, kept by the reapers.
    cluster.write_config(
        [scripted(lead=[interactive("slowpoke"), "lead done"],
                  slowpoke=[{"tool_calls": [{"name": "ask_user", "arguments": {"question": "Colour?"}}]},
                            complete("never")])],
        [{"name": "lead", "options": {"max_delegation_depth": 1, "question_timeout": "1s", **INTERACTIVE}},
         {"name": "slowpoke"}],
    )
    cluster.start_worker("solo", concurrency=1)
    out = run_json(cluster, "go")
    assert out["reply"] == "lead done"
    assert [json.loads(r) for r in root_tool_results(cluster, out["session"])] == [
        [{"agent": "slowpoke", "error": "question timeout (1s) exceeded for delegation d-1"}]]


def on_board(agent: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "delegate", "arguments": {"tasks": [
        {"agent": agent, "task": f"{agent} task", "context": "ctx", "mode": "interactive", "task_id": "{task}"}]}}]}


def test_a_waiting_child_cancelled_by_its_parents_end_moves_its_board_task_to_failed(cluster: Cluster):
    # Shelly: the delegation's own context is canceled, so the child ends in runChildWithHandoff's
    # generic error branch ("context canceled", the task failed), not the board's "task canceled".
    cluster.write_config(
        [scripted(lead=["ready", on_board("asker"), "not answering"],
                  asker=[ask_parent("Which colour?"), complete("never")])],
        [{"name": "lead", "toolboxes": ["tasks"], "options": {"max_delegation_depth": 1, **INTERACTIVE}},
         {"name": "asker", "toolboxes": ["tasks"]}],
    )
    cluster.start_worker("solo", concurrency=1)
    session, task_id, out = board_task_in_a_second_turn(cluster, "hello")
    assert out["reply"] == "not answering"
    wait_until(lambda: board_status(cluster, session, task_id) == "failed", 60, "the task failed")
    asker = run_of(cluster, session, "asker")
    assert asker["status"] == "canceled"
    assert json.loads(cluster.redis.hget(Keys(cluster.prefix).run(asker["id"]), "result"))["error"] == \
        "context canceled"


def test_a_suspended_child_past_question_timeout_ends_and_moves_its_board_task_to_failed(cluster: Cluster):
    # The child waits on the user (ask_user): the reaper's timeout resumes it so it ends now.
    cluster.write_config(
        [scripted(lead=["ready", on_board("slowpoke"), "lead done"],
                  slowpoke=[{"tool_calls": [{"name": "ask_user", "arguments": {"question": "Colour?"}}]},
                            complete("never")])],
        [{"name": "lead", "toolboxes": ["tasks"],
          "options": {"max_delegation_depth": 1, "question_timeout": "1s", **INTERACTIVE}},
         {"name": "slowpoke", "toolboxes": ["tasks"]}],
    )
    cluster.start_worker("solo", concurrency=1)
    session, task_id, out = board_task_in_a_second_turn(cluster, "hello")
    assert out["reply"] == "lead done"
    wait_until(lambda: board_status(cluster, session, task_id) == "failed", 60, "the task failed")
    assert run_of(cluster, session, "slowpoke")["status"] == "canceled"


def test_a_worker_killed_while_the_answered_child_works_delivers_the_answer_once(cluster: Cluster):
    # Right after the parent answers, the child's next step is in flight on a worker that is then
    # killed -9: the reaper re-enqueues the child (default lease) and it goes on elsewhere with the
    # parent's answer as its request_input result exactly once, and the round ends with its result.
    in_flight, killed = threading.Event(), threading.Event()

    def respond(req: RecordedRequest) -> Reply:
        turns = sum(1 for m in req.body["messages"] if m.get("role") == "assistant")
        if turns == 0:
            return Reply(text="", tool_calls=[{"name": "request_input", "arguments": {"question": "What API?"}}])
        if not killed.is_set():
            in_flight.set()
            return Reply(text="too late", delay=120)
        return Reply(text="", tool_calls=[{"name": "task_complete",
                                           "arguments": {"status": "completed", "summary": "used REST"}}])

    with ModelServer(format="openai", responder=respond) as server:
        cluster.write_config(
            [scripted(lead=[interactive("asker"), answer("d-1", "REST"), "lead done"]),
             {"name": "mock", "kind": "openai", "model": "gpt-test", "base_url": server.url, "api_key": "k",
              "rate_limit": {"max_retries": 1, "base_delay": "10ms"}}],
            [{"name": "lead", "options": {"max_delegation_depth": 1, **INTERACTIVE}},
             {"name": "asker", "provider": "mock"}],
            distributed={"step_time_limit": 600, "visibility_timeout": None},
        )
        workers = {cluster.start_worker("wa"), cluster.start_worker("wb")}
        coordinator = cluster.popen("run", "go", "--json")
        try:
            assert in_flight.wait(90), "the answered child's next step never started"
            session = cluster.session_ids()[0]
            asker = run_of(cluster, session, "asker")
            holder = cluster.redis.hget(Keys(cluster.prefix).run(asker["id"]), "worker")
            assert holder in workers
            killed.set()
            cluster.kill_worker(holder)
            stdout, stderr = coordinator.communicate(timeout=120)
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
                coordinator.wait(10)
        assert coordinator.returncode == 0, f"{stderr}\n{cluster.worker_log()}"
        assert json.loads(stdout)["reply"] == "lead done"
        replayed = [r for r in server.requests if sum(1 for m in r.body["messages"] if m.get("role") == "assistant")]
        answers_seen = [m.get("content") for m in replayed[-1].body["messages"] if m.get("role") == "tool"]
    assert answers_seen == ["REST"]
    assert tool_results(cluster, asker["id"]) == ["REST", "Task marked as completed."]
    asked, finished = (json.loads(r) for r in root_tool_results(cluster, session))
    assert asked[0]["pending_question"]["content"] == "What API?"
    assert finished == [{"agent": "asker", "result": "used REST",
                         "completion": {"status": "completed", "summary": "used REST"}}]
    assert cluster.redis.hget(Keys(cluster.prefix).run(asker["id"]), "worker") not in (holder, None)


def test_a_child_waiting_for_its_answer_holds_no_max_concurrency_slot(cluster: Cluster):
    # As embedded: with one slot for asker, the second asker starts and asks in the same round only
    # because the first holds no slot while it waits for its answer.
    cluster.write_config(
        [scripted(lead=[interactive("asker", "asker"),
                        {"tool_calls": [{"name": "answer_delegation_questions", "arguments": {"answers": [
                            {"delegation_id": "d-1", "answer": "REST"}, {"delegation_id": "d-2", "answer": "gRPC"}]}}]},
                        "lead done"],
                  asker=[ask_parent("What API?"), complete("done")])],
        [{"name": "lead", "options": {"max_delegation_depth": 1, "question_timeout": "60s", **INTERACTIVE}},
         {"name": "asker", "max_concurrency": 1}],
    )
    cluster.start_worker("w1", concurrency=2)
    out = run_json(cluster, "go")
    assert out["reply"] == "lead done"
    asked, finished = (json.loads(r) for r in root_tool_results(cluster, out["session"]))
    assert [e["pending_question"]["content"] for e in asked] == ["What API?"] * 2
    assert [e["result"] for e in finished] == ["done", "done"]


def test_a_failed_interactive_child_does_not_stop_its_siblings_under_fail_fast(cluster: Cluster):
    # As embedded, where an interactive delegate call runs no fail-fast (Shelly has none): the
    # asker, waiting for its answer when its sibling fails, still gets it and finishes.
    cluster.write_config(
        [scripted(lead=[interactive("asker", "bad"), answer("d-1", "REST"), "lead done"],
                  asker=[ask_parent("What API?"), complete("used REST")], bad=[{"error": "simulated outage"}]),
         ],
        [{"name": "lead", "options": {"max_delegation_depth": 1, "delegate_fail_fast": True, **INTERACTIVE}},
         {"name": "asker"}, {"name": "bad"}],
    )
    cluster.start_worker("solo", concurrency=1)
    out = run_json(cluster, "go")
    assert out["reply"] == "lead done"
    asked, answered = (json.loads(r) for r in root_tool_results(cluster, out["session"]))
    assert asked[0]["delegation_id"] == "d-1" and "simulated outage" in asked[1]["error"]
    assert answered == [{"agent": "asker", "result": "used REST",
                         "completion": {"status": "completed", "summary": "used REST"}}]


def run_lead_mid_dig(cluster: Cluster, server: ModelServer, *, lead: list[Any], mid: list[Any],
                     **lead_options: Any) -> dict[str, Any]:
    """Run lead -> mid (interactive) -> dig, whose model is ``server``, on a worker of two slots;
    ``run``'s JSON."""
    cluster.write_config(
        [scripted(lead=lead, mid=mid),
         {"name": "mock", "kind": "openai", "model": "gpt-test", "base_url": server.url, "api_key": "k",
          "rate_limit": {"max_retries": 1, "base_delay": "10ms"}}],
        [{"name": "lead", "options": {"max_delegation_depth": 2, **lead_options, **INTERACTIVE}},
         {"name": "mid", "options": {"max_delegation_depth": 2}},
         {"name": "dig", "provider": "mock"}],
        distributed={"step_time_limit": 600},
    )
    cluster.start_worker("w1", concurrency=2)
    return run_json(cluster, "go")


def ended(cluster: Cluster, session: str, agent: str) -> dict[str, str]:
    """``agent``'s run once it has ended (a generous deadline)."""
    return wait_until(lambda: (r := run_of(cluster, session, agent))["status"] in ("done", "failed", "canceled")
                      and r, 60, f"{agent} ended")


def test_a_child_stopped_by_question_timeout_takes_its_own_delegated_children_with_it(cluster: Cluster):
    # lead -> mid (interactive) -> dig (blocking, its model call held for minutes). mid is still
    # waiting on dig when lead's question_timeout stops it: as embedded, where the cancel of mid's
    # task cancels dig's, dig ends canceled too instead of running on.
    with ModelServer(format="openai", default=Reply(text="dug", delay=120)) as server:
        out = run_lead_mid_dig(cluster, server, lead=[interactive("mid"), "lead done"],
                               mid=[delegate_all(("dig", "dig deep")), "mid done"], question_timeout="10s")
        assert out["reply"] == "lead done"
        assert server.requests, "dig's model call never started before the timeout"
        mid, dig = ended(cluster, out["session"], "mid"), ended(cluster, out["session"], "dig")
    assert mid["status"] == "canceled"
    assert dig["status"] == "canceled"
    assert json.loads(cluster.redis.hget(Keys(cluster.prefix).run(dig["id"]), "result"))["error"] == \
        "context canceled"


def test_a_waiting_child_cancelled_by_its_parents_end_takes_its_own_delegated_children_with_it(cluster: Cluster):
    # mid delegates to dig (its model call held for minutes) and asks lead in the same reply; lead
    # ends without answering: mid is cancelled, and dig with it.
    both = {"tool_calls": [delegate_all(("dig", "dig deep"))["tool_calls"][0],
                           ask_parent("Which colour?")["tool_calls"][0]]}
    with ModelServer(format="openai", default=Reply(text="dug", delay=120)) as server:
        out = run_lead_mid_dig(cluster, server, lead=[interactive("mid"), "not answering"], mid=[both, "mid done"])
        assert out["reply"] == "not answering"
        dig = ended(cluster, out["session"], "dig")
    assert dig["status"] == "canceled"
    assert json.loads(cluster.redis.hget(Keys(cluster.prefix).run(dig["id"]), "result"))["error"] == \
        "context canceled"
