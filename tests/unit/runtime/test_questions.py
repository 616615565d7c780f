"""The ask_user join on fakeredis (Lua): a question is registered once per call and counted in the
run's pending like a child; the first answer wins (a timeout is an answer) and completes the join;
the resumed run gets the answer as the call's result."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import fakeredis
import pytest

from shelly_dist import Message, Role
from shelly_dist.agent import Run, Suspended
from shelly_dist.runtime.celery.children import questions
from shelly_dist.runtime.celery.journal import Journal, Lease
from shelly_dist.runtime.celery.settings import RuntimeSettings
from shelly_dist.tools.builtin.ask import Responder, SuspendingAnswerer

from ..agent.helpers import Team, call


@pytest.fixture
async def journal() -> AsyncIterator[Journal]:
    client = fakeredis.FakeAsyncRedis(decode_responses=True)
    settings = RuntimeSettings(broker_url="redis://", redis_url="redis://", key_prefix=f"t:{uuid.uuid4().hex[:6]}:")
    yield Journal(client, settings)
    await client.aclose()


async def asking_run(journal: Journal, limit: float = 0) -> tuple[Lease, Run]:
    await journal.create_root("root", agent="asker", session="s", mode="worker", task="go", fingerprint="fp")
    claim = await journal.claim("root", "root", "holder", "w0")
    assert claim.lease is not None
    team = Team()
    team.add("asker", [call("ask_user", {"question": "Colour?", "options": ["red", "blue"]}), "picked"],
             toolboxes=(Responder(SuspendingAnswerer()).toolbox(limit=limit),))
    run = Run.start(team.spawn("asker"), [Message.text("user", Role.USER, "go")], run_id="root")
    assert isinstance(await run.step(), Suspended)
    return claim.lease, run


async def answer(journal: Journal, qid: str, text: str) -> questions.Answered:
    s = journal.settings
    return await questions.answer(journal.client, journal.keys, "s", qid, text, retention=s.retention,
                                  requeue_after=s.requeue_after)


async def test_a_question_is_registered_once_and_counted_in_the_runs_pending(journal: Journal):
    lease, run = await asking_run(journal)
    await questions.register(lease, run)
    await questions.register(lease, run)  # a repeated step registers nothing twice
    assert (await journal.record("root")).pending == 1
    listed = await questions.open_questions(journal.client, journal.keys, "s")
    assert [(q["id"], q["agent"], q["run"], q["text"], q["options"]) for q in listed] == [
        ("q-1", run.agent.name, "root", "Colour?", ["red", "blue"])]
    assert await lease.release() == 1  # the run lets its worker go while the question waits
    assert (await journal.record("root")).status == "waiting"


async def test_the_first_answer_wins_and_completes_the_join(journal: Journal):
    lease, run = await asking_run(journal)
    await questions.register(lease, run)
    await lease.release()
    first = await answer(journal, "q-1", "blue")
    assert (first.outcome, first.run, first.resume) == ("ok", "root", True)
    assert (await answer(journal, "q-1", "red")).outcome == "unknown"
    assert (await journal.record("root")).pending == 0
    assert await questions.open_questions(journal.client, journal.keys, "s") == []

    claim = await journal.claim("root", "root", "next", "w1")  # the resume, on any worker
    assert claim.lease is not None
    await questions.collect(claim.lease, run)
    assert not run.waiting()
    assert (await run.until_done()).text_content() == "picked"
    results = [m.parts[0] for m in run.agent.chat.messages() if m.role == Role.TOOL]
    assert [(r.content, r.is_error) for r in results] == [("blue", False)]


async def test_a_question_past_its_timeout_is_answered_with_the_timeout_error(journal: Journal):
    lease, run = await asking_run(journal, limit=0.05)
    await questions.register(lease, run)
    await lease.release()
    resumed: list[str] = []

    async def resume(run_id: str, root: str) -> None:
        resumed.append(run_id)

    s = journal.settings
    deadline = time.monotonic() + 10
    while not await questions.expire_due(journal.client, journal.keys, ["root"], retention=s.retention,
                                         requeue_after=s.requeue_after, resume=resume):
        assert time.monotonic() < deadline, "the question never expired"
        await asyncio.sleep(0.05)
    assert resumed == ["root"]
    assert (await answer(journal, "q-1", "late")).outcome == "unknown"
    claim = await journal.claim("root", "root", "next", "w1")
    assert claim.lease is not None
    await questions.collect(claim.lease, run)
    (result,) = run.state.tool_results.values()
    assert result.is_error and result.content == "ask_user: no answer to q-1 within 0.05s (options.question_timeout)"


async def test_a_step_that_registers_its_question_again_repairs_a_lost_session_index_entry(journal: Journal):
    lease, run = await asking_run(journal)
    await questions.register(lease, run)
    await journal.client.delete(journal.keys.session_questions("s"))  # the worker died after the script
    assert await questions.open_questions(journal.client, journal.keys, "s") == []
    await questions.register(lease, run)  # the step, run again
    assert [q["id"] for q in await questions.open_questions(journal.client, journal.keys, "s")] == ["q-1"]
    assert (await journal.record("root")).pending == 1


async def test_timing_out_a_question_already_answered_keeps_the_answer(journal: Journal):
    lease, run = await asking_run(journal, limit=30)
    await questions.register(lease, run)
    await lease.release()
    s = journal.settings
    assert await questions.deadline_of(journal.client, journal.keys, "root", "q-1") is not None
    assert (await answer(journal, "q-1", "blue")).outcome == "ok"
    late = await questions.time_out(journal.client, journal.keys, "root", "q-1", retention=s.retention,
                                    requeue_after=s.requeue_after)
    assert late.outcome == "unknown"
    assert await questions.deadline_of(journal.client, journal.keys, "root", "q-1") is None
    claim = await journal.claim("root", "root", "next", "w1")
    assert claim.lease is not None
    await questions.collect(claim.lease, run)
    (result,) = run.state.tool_results.values()
    assert (result.is_error, result.content) == (False, "blue")


async def test_the_timeout_result_names_the_questions_own_limit_whoever_times_it_out(journal: Journal):
    lease, run = await asking_run(journal, limit=30)
    await questions.register(lease, run)
    s = journal.settings
    done = await questions.time_out(journal.client, journal.keys, "root", "q-1", retention=s.retention,
                                    requeue_after=s.requeue_after)
    assert done.outcome == "ok"
    raw = await journal.client.hget(journal.keys.run_children("root"), questions.answer_field(run.state.iteration,
                                                                                            next(iter(run.state.awaiting))))
    assert questions.result_of(raw).content == "ask_user: no answer to q-1 within 30s (options.question_timeout)"
