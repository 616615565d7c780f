"""``ask_user`` on the pool: the asking run suspends durably (no worker slot held), the question
shows in ``shelly questions`` and the event stream, and ``shelly answer`` from another process
resumes it on any worker (issue 14, Build item 2; real Redis, real ``shelly worker`` processes)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from shelly_dist.engine import Engine
from shelly_dist.redisio.keys import Keys

from .cluster import Cluster, complete, delegate, scripted, wait_until
from .keys import assert_all_keys_have_ttl

# several `shelly` start-ups per test: one took 111 s at load 12, past the 120 s default
pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def ask(text: str, options: list[str] | None = None) -> dict[str, Any]:
    return {"tool_calls": [{"name": "ask_user", "arguments": {"question": text, "options": options or []}}]}


def team(cluster: Cluster, *, asker_options: dict[str, Any] | None = None, lead_options: dict[str, Any] | None = None,
         extra_options: dict[str, Any] | None = None, **scripts: list[Any]) -> None:
    """``lead`` delegates to ``asker`` (who asks the user, then completes); ``other`` delegates to
    ``quick`` (a plain child) — a second tree to run while the first waits for its answer."""
    cluster.write_config(
        [scripted(
            lead=[delegate(("asker", "pick a colour")), "lead done"],
            asker=[ask("Which colour?", ["red", "blue"]), complete("asked")],
            other=[delegate(("quick", "quick job")), "other done"],
            quick=[complete("quick done")],
            **scripts,
        )],
        [{"name": "lead", "options": {"max_delegation_depth": 1, **(lead_options or {})}},
         {"name": "asker", "options": asker_options or {}},
         {"name": "other", "options": {"max_delegation_depth": 1}},
         {"name": "quick"},
         *({"name": name, "options": extra_options or {}} for name in scripts)],
    )


def open_questions(cluster: Cluster, session: str) -> list[dict[str, Any]]:
    out = cluster.shelly("questions", "--session", session, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def start_run(cluster: Cluster, agent: str, task: str) -> subprocess.Popen[str]:
    return cluster.popen("run", task, "--agent", agent, "--json", "--quiet")


def finished(proc: subprocess.Popen[str], cluster: Cluster, timeout: float = 120) -> dict[str, Any]:
    stdout, stderr = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"stdout:{stdout}\nstderr:{stderr}\n{cluster.worker_log()}"
    return json.loads(stdout)


def tool_results(cluster: Cluster, run_id: str) -> list[dict[str, Any]]:
    msgs = [json.loads(m) for m in cluster.redis.lrange(Keys(cluster.prefix).run_msgs(run_id), 0, -1)]
    return [p for m in msgs if m["role"] == "tool" for p in m["parts"]]


def asker_run(cluster: Cluster, session: str) -> dict[str, str]:
    return next(r for r in cluster.runs(session) if r["agent"] == "asker")


def test_ask_user_of_a_child_waits_holding_no_slot_and_shelly_answer_from_another_process_resumes_it(cluster: Cluster):
    team(cluster)
    cluster.start_worker("solo", concurrency=1)
    first = start_run(cluster, "lead", "colour job")
    try:
        session = cluster.session_ids()[0]
        questions = wait_until(lambda: open_questions(cluster, session), 90, "the asker's question")
        assert [(q["id"], q["agent"], q["text"], q["options"]) for q in questions] == [
            ("q-1", questions[0]["agent"], "Which colour?", ["red", "blue"])]
        assert questions[0]["agent"].startswith("asker-")
        assert questions[0]["run"] == asker_run(cluster, session)["id"]
        assert asker_run(cluster, session)["status"] == "waiting"

        # The only slot is free: another tree's child runs to the end on it while the question waits.
        other = cluster.shelly("run", "second job", "--agent", "other", "--json", "--quiet")
        assert other.returncode == 0, f"{other.stderr}\n{cluster.worker_log()}"
        assert json.loads(other.stdout)["reply"] == "other done"
        assert open_questions(cluster, session) != []

        answered = cluster.shelly("answer", "--session", session, "q-1", "blue")
        assert answered.returncode == 0, answered.stderr
        out = finished(first, cluster)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert out["reply"] == "lead done"
    child = asker_run(cluster, session)
    assert child["status"] == "done"
    assert any(p.get("content") == "blue" and not p.get("is_error") for p in tool_results(cluster, child["id"]))
    assert open_questions(cluster, session) == []


def test_the_question_is_an_ask_user_event_in_the_sessions_stream(cluster: Cluster):
    team(cluster)
    cluster.start_worker("solo", concurrency=1)
    first = start_run(cluster, "lead", "colour job")
    try:
        session = cluster.session_ids()[0]
        wait_until(lambda: open_questions(cluster, session), 90, "the asker's question")
        asked = wait_until(lambda: [e for e in cluster.events(session) if e["kind"] == "ask_user"], 30,
                           "an ask_user event")
        assert asked[0]["data"]["id"] == "q-1"
        assert asked[0]["data"]["text"] == "Which colour?"
        assert asked[0]["data"]["options"] == ["red", "blue"]
        assert asked[0]["agent"].startswith("asker-")
        assert cluster.shelly("answer", "--session", session, "q-1", "red").returncode == 0
        finished(first, cluster)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()


def test_question_timeout_ends_the_wait_with_an_error_result_on_the_pool(cluster: Cluster):
    team(cluster, asker_options={"question_timeout": "2s"})
    cluster.start_worker("solo", concurrency=1)
    out = finished(start_run(cluster, "lead", "colour job"), cluster)
    assert out["reply"] == "lead done"
    child = asker_run(cluster, out["session"])
    errors = [p for p in tool_results(cluster, child["id"]) if p.get("is_error")]
    assert errors and errors[0]["content"] == "ask_user: no answer to q-1 within 2s (options.question_timeout)"
    assert open_questions(cluster, out["session"]) == []


def test_answering_a_question_that_is_not_open_is_a_one_line_error(cluster: Cluster):
    team(cluster)
    out = cluster.shelly("answer", "--session", "0123456789abcdef", "q-7", "blue")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith(
        "shelly: answer: no open question q-7 in session 0123456789abcdef")


def test_a_piped_shelly_run_whose_top_level_agent_asks_waits_for_shelly_answer(cluster: Cluster):
    team(cluster, boss=[ask("Ship it?", ["yes", "no"]), "boss heard {task}"])
    first = start_run(cluster, "boss", "release")
    try:
        session = cluster.session_ids()[0]
        questions = wait_until(lambda: open_questions(cluster, session), 90, "the boss's question")
        assert [(q["id"], q["text"], q["options"]) for q in questions] == [("q-1", "Ship it?", ["yes", "no"])]
        assert cluster.shelly("answer", "--session", session, "q-1", "yes").returncode == 0
        out = finished(first, cluster)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert out["reply"] == "boss heard release"
    root = next(r for r in cluster.runs(session) if r["agent"] == "boss")
    assert root["status"] == "done"


async def test_session_respond_in_python_answers_a_question_of_a_child_on_a_worker(cluster: Cluster):
    import asyncio

    team(cluster)
    cluster.start_worker("solo", concurrency=1)
    async with await Engine.open(cluster.root / ".shelly" / "config.yaml", shelly_dir=cluster.root / ".shelly") as eng:
        session = eng.session(agent="lead", persist=False)
        sending = asyncio.create_task(session.send("colour job"))
        deadline = asyncio.get_running_loop().time() + 90
        while not (questions := await session.questions()):
            assert not sending.done(), sending.result()
            assert asyncio.get_running_loop().time() < deadline, cluster.worker_log()
            await asyncio.sleep(0.1)
        await session.respond(questions[0]["id"], "blue")
        outcome = await asyncio.wait_for(sending, 90)
    assert outcome.reply.text_content() == "lead done"
    assert any(p.get("content") == "blue" for p in tool_results(cluster, asker_run(cluster, session.id)["id"]))


def answered_elsewhere(cluster: Cluster, *args: str) -> tuple[str, str]:
    """A piped ``shelly run`` of ``lead`` whose child's question ``shelly answer`` answers from
    another process; the session and the run's stderr once it exited 0."""
    team(cluster)
    cluster.start_worker("solo", concurrency=1)
    first = cluster.popen("run", "colour job", "--agent", "lead", *args)
    try:
        session = wait_until(lambda: cluster.session_ids(), 60, "the session")[0]
        wait_until(lambda: open_questions(cluster, session), 90, "the asker's question")
        assert cluster.shelly("answer", "--session", session, "q-1", "blue").returncode == 0
        _, stderr = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == 0, stderr
    return session, stderr


def test_a_piped_shelly_run_says_on_stderr_how_to_answer_a_question_of_a_child_on_a_worker(cluster: Cluster):
    session, stderr = answered_elsewhere(cluster, "--json")
    assert f"answer it with: shelly answer --session {session} q-1 TEXT" in stderr
    assert "Which colour?  [red / blue]" in stderr


def test_a_batch_item_that_asks_waits_on_the_pool_until_shelly_answer(cluster: Cluster):
    team(cluster, boss=[ask("Ship it?", ["yes", "no"]), "boss heard {task}"])
    cluster.start_worker("solo", concurrency=1)
    tasks = cluster.root / "in.jsonl"
    tasks.write_text(json.dumps({"id": "item-1", "agent": "boss", "task": "release"}) + "\n")
    output = cluster.root / "out.jsonl"
    batch = cluster.popen("batch", "--tasks", str(tasks), "--output", str(output), "--quiet")
    try:
        session = cluster.session_ids()[0]
        questions = wait_until(lambda: open_questions(cluster, session), 90, "the batch item's question")
        assert [(q["id"], q["text"]) for q in questions] == [("q-1", "Ship it?")]
        assert cluster.shelly("answer", "--session", session, "q-1", "yes").returncode == 0
        _, stderr = batch.communicate(timeout=120)
    finally:
        if batch.poll() is None:
            batch.kill()
            batch.communicate()
    assert batch.returncode == 0, f"{stderr}\n{cluster.worker_log()}"
    (record,) = map(json.loads, output.read_text().splitlines())
    assert (record["id"], record["status"], record["reply"]) == ("item-1", "completed", "boss heard release")


def test_a_top_level_question_past_its_timeout_gives_the_error_result_and_the_run_goes_on(cluster: Cluster):
    team(cluster, extra_options={"question_timeout": "1s"}, boss=[ask("Ship it?"), "boss went on"])
    out = finished(start_run(cluster, "boss", "release"), cluster)
    assert out["reply"] == "boss went on"
    tools = [e["data"]["text"] for e in cluster.events(out["session"])
             if e["kind"] == "message_added" and e["data"].get("role") == "tool"]
    assert tools == ["ask_user: no answer to q-1 within 1s (options.question_timeout)"]
    assert open_questions(cluster, out["session"]) == []


def test_a_waiting_question_survives_its_worker_and_the_answer_resumes_the_run_on_another(cluster: Cluster):
    team(cluster)
    first_worker = cluster.start_worker("first", concurrency=1)
    run = start_run(cluster, "lead", "colour job")
    try:
        session = cluster.session_ids()[0]
        wait_until(lambda: open_questions(cluster, session), 90, "the asker's question")
        cluster.kill_worker(first_worker)
        second_worker = cluster.start_worker("second", concurrency=1)
        assert cluster.shelly("answer", "--session", session, "q-1", "blue").returncode == 0
        out = finished(run, cluster)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert out["reply"] == "lead done"
    child = asker_run(cluster, session)
    assert child["status"] == "done" and child["worker"] == second_worker


def test_every_key_a_question_writes_has_a_ttl_while_it_waits_and_after_its_answer(cluster: Cluster):
    team(cluster, asker_options={"question_timeout": "1h"})
    cluster.start_worker("solo", concurrency=1)
    run = start_run(cluster, "lead", "colour job")
    try:
        session = cluster.session_ids()[0]
        wait_until(lambda: open_questions(cluster, session), 90, "the asker's question")
        assert_all_keys_have_ttl(cluster.redis, cluster.prefix)
        assert cluster.shelly("answer", "--session", session, "q-1", "blue").returncode == 0
        finished(run, cluster)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert_all_keys_have_ttl(cluster.redis, cluster.prefix)


def test_the_question_hint_follows_the_asking_runs_lines_in_the_live_view(cluster: Cluster):
    _, stderr = answered_elsewhere(cluster)
    lines = stderr.splitlines()
    asked = next(i for i, line in enumerate(lines) if "→ ask_user" in line)
    started = next(i for i, line in enumerate(lines) if "▶ asker-pick-1 started" in line)
    hint = next(i for i, line in enumerate(lines) if line.startswith("question q-1"))
    assert started < asked < hint, stderr
