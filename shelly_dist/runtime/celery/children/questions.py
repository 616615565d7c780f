"""``ask_user`` on the pool: a question suspends its run durably, an answer from anywhere resumes it.

A run on a worker that calls ``ask_user`` does not wait in its worker slot. The tool call is
journaled as awaiting (:class:`~shelly_dist.tools.suspend.SuspendCall`), then :func:`register`
numbers the question for the session (``q-N``, unique across workers), lists it among the session's
open questions and counts it in the run's ``pending`` like a child, so the run is released
(``waiting``) exactly as a run waiting on its children is. An answer — ``shelly answer``,
``Session.respond``, or the reaper's timeout — is joined into the run the way a child's entry is
(``control_scripts.ANSWER``): stored once under the run's children hash, the pending count decremented once,
the run's channel published; the caller that brings the count to zero enqueues the resume (and the
same step puts the run in the tree's deadline index, so the reaper resumes it if that caller dies
first). The resumed run, on any worker, delivers the stored answer as the call's result.

A coordinator's top-level run asks through :class:`~.root_answerer.RootAnswerer`: the coordinator
process holds no worker, so it registers the question the same way and waits on the run's channel.

``options.question_timeout`` is enforced by the reapers: a question with a deadline is indexed in
its tree's ``…:questions:due`` (and the tree hinted in the due index, :mod:`.due`); the reaper
that scans the tree's shard answers the questions past it with the timeout error result
(:func:`expire_due`), so the deadline holds whichever worker, if any, is alive when it passes
(late by at most ``reap_interval`` when a worker is up, at the next scan otherwise).

Keys (all with the retention TTL, built by :class:`~shelly_dist.state.keys.Keys`): the question
lives in its *tree's* slot — ``tree_questions`` (open questions, id → JSON), ``tree_questions_due``
(their deadlines), ``run_asked`` (the run's questions by call, so a repeated step registers nothing
twice), answers in ``run_children`` under ``ask:<iteration>:<call id>`` — so each script touches
one slot, passed in ``KEYS`` (a Redis Cluster runs them). The session's keys are written by plain
commands around the scripts: ``question_counter`` numbers the questions ``q-N`` across the
session's trees, and ``session_questions`` maps an open id to its tree for ``shelly questions`` /
``shelly answer`` (written after the question, every time a step registers it; dropped after the
answer — an entry whose question is gone lists nothing).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from shelly_dist import events
from shelly_dist.agent import Run
from shelly_dist.chats import ToolResult
from shelly_dist.errors import UsageError
from shelly_dist.runtime.celery.journal import Lease
from shelly_dist.runtime.celery.journal.due import DueIndex
from shelly_dist.runtime.celery.journal.registry import registered
from shelly_dist.runtime.celery.journal.store import run_script
from shelly_dist.state.connection import redis_errors
from shelly_dist.state.keys import Keys
from shelly_dist.tools.builtin.ask import ASK_USER, Question, timeout_error

__all__ = ["Answered", "answer", "answer_field", "ask", "collect", "deadline_of", "expire_due", "open_questions",
           "register", "require_open", "time_out"]

def answer_field(iteration: int, call_id: str) -> str:
    """Where a call's answer joins the run (unique per suspension, as a child's key)."""
    return f"ask:{iteration}:{call_id}"


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def result_of(raw: str) -> ToolResult:
    data = json.loads(raw)
    return ToolResult(tool_call_id="", content=str(data.get("content", "")), is_error=bool(data.get("is_error")))


async def ask(lease: Lease, agent: str, run_id: str, field: str, payload: dict[str, Any]) -> tuple[str, bool]:
    """Register one question of the leased run; returns (its id, whether it is new)."""
    store, r = lease.store, lease.record
    keys, settings, client = store.keys, store.settings, store.client
    timeout = float(payload.get("timeout") or 0)
    now = time.time()
    with redis_errors("questions"):
        qid = await client.hget(keys.run_asked(run_id), field)
        if qid is None:  # a number taken by a step that then died is only a gap in the ids
            qid = f"q-{await client.incr(keys.question_counter(r.session))}"
    question = {k: payload[k] for k in ("text", "options", "header", "multiSelect", "maxSelections") if payload.get(k)}
    question |= {"text": str(payload.get("text", "")), "agent": agent, "run": run_id, "root": r.root,
                 "session": r.session, "field": field, "asked": now, "timeout": timeout}
    script = store.control.ask  # control_scripts.ASK
    due = _ms(now + timeout) if timeout else 0
    out = await store.run_script(
        script,
        [keys.run(run_id), keys.run_lease(run_id), keys.run_asked(run_id), keys.tree_questions(r.root),
         keys.tree_questions_due(r.root)],
        [lease.token, field, qid, json.dumps(question), settings.retention, due],
        hint=(r.root, due) if due else None,
    )
    qid, new, still_open = str(out[0]), int(out[1]) == 1, int(out[2]) == 1
    if still_open:
        # The session's index is another slot than the tree: written after the script, every time
        # (idempotent), so a step that died in between and runs again repairs it.
        with redis_errors("questions"):
            async with client.pipeline(transaction=False) as pipe:
                pipe.hset(keys.session_questions(r.session), qid, r.root)
                pipe.expire(keys.session_questions(r.session), settings.retention)
                pipe.expire(keys.question_counter(r.session), settings.retention)
                await pipe.execute()
    return qid, new


async def register(lease: Lease, run: Run) -> None:
    """Register every awaiting ``ask_user`` call of the leased run (idempotent: a question already
    registered keeps its id) and announce the new ones with an ``ask_user`` event."""
    for call_id, payload in list(run.state.awaiting.items()):
        if payload.get("kind") != ASK_USER:
            continue
        field = answer_field(run.state.iteration, call_id)
        qid, new = await ask(lease, run.agent.name, run.state.run_id, field, payload)
        payload["id"] = qid
        if new:
            data = Question.model_validate({**payload, "id": qid}).event_data()
            run.emit(events.ASK_USER, **data)


async def collect(lease: Lease, run: Run) -> None:
    """Deliver every answer that has joined into the run as its call's result."""
    calls = [c for c, p in run.state.awaiting.items() if p.get("kind") == ASK_USER]
    if not calls:
        return
    fields = [answer_field(run.state.iteration, c) for c in calls]
    store = lease.store
    with redis_errors("journal"):
        raw = await store.client.hmget(store.keys.run_children(run.state.run_id), fields)
    for call_id, value in zip(calls, raw, strict=True):
        if value:
            run.deliver_result(call_id, result_of(value))


@dataclass
class Answered:
    """What answering a question did: ``ok``, ``unknown`` (no such open question) or ``gone``
    (its run has ended); ``resume`` names the run to enqueue when this answer completed its join."""

    outcome: str
    run: str = ""
    root: str = ""
    resume: bool = False


async def answer(
    client: aioredis.Redis, keys: Keys, session: str, qid: str, text: str, *, retention: int,
    requeue_after: float, is_error: bool = False,
) -> Answered:
    """Answer question ``qid`` of ``session`` (from any process). The first answer wins."""
    with redis_errors("questions"):
        root = await client.hget(keys.session_questions(session), qid)
    if root is None:
        return Answered("unknown")
    return await _answer_in_tree(client, keys, session, root, qid, text, retention=retention,
                                 requeue_after=requeue_after, is_error=is_error)


async def _answer_in_tree(
    client: aioredis.Redis, keys: Keys, session: str, root: str, qid: str, text: str, *, retention: int,
    requeue_after: float, is_error: bool,
) -> Answered:
    """Join the answer into the tree (one script, one slot), then drop the question from the
    session's index (another slot; an entry left by a crash in between lists nothing, its
    question being gone from the tree)."""
    with redis_errors("questions"):
        raw = await client.hget(keys.tree_questions(root), qid)
        out: list[Any] = ["unknown"]
        run_id = ""
        if raw is not None:
            q = json.loads(raw)
            run_id = str(q["run"])
            resume_at = _ms(time.time() + requeue_after)
            out = await run_script(
                registered(client).control.answer,  # control_scripts.ANSWER
                [keys.tree_questions(root), keys.run(run_id), keys.run_children(run_id),
                 keys.tree_deadlines(root), keys.tree_questions_due(root)],
                [qid, json.dumps({"content": text, "is_error": is_error}), q["field"], retention, resume_at, run_id],
                hint=(root, resume_at), due=DueIndex(client, keys, retention), origin="questions",
            )
        await client.hdel(keys.session_questions(session), qid)
    outcome = str(out[0])
    if outcome != "ok":
        return Answered(outcome, run_id, root)
    return Answered("ok", run_id, root, resume=int(out[1]) == 0 and str(out[2]) == "worker")


async def open_questions(client: aioredis.Redis, keys: Keys, session: str) -> list[dict[str, Any]]:
    """The session's unanswered questions whose run still waits, oldest first:
    ``{id, agent, run, text, options, …}``."""
    with redis_errors("questions"):
        index = await client.hgetall(keys.session_questions(session))
        async with client.pipeline(transaction=False) as pipe:
            for qid, root in index.items():
                pipe.hget(keys.tree_questions(root), qid)
            raws = await pipe.execute()
        found = [{"id": qid, **json.loads(raw)} for qid, raw in zip(index, raws, strict=True) if raw is not None]
        async with client.pipeline(transaction=False) as pipe:
            for q in found:
                pipe.hget(keys.run(q["run"]), "status")
            statuses = await pipe.execute()
    out = []
    for q, status in zip(found, statuses, strict=True):
        if status is None or status in ("done", "failed", "canceled"):
            continue
        q.setdefault("options", [])
        for internal in ("field", "root", "session"):
            q.pop(internal, None)
        out.append(q)
    return sorted(out, key=lambda q: (float(q.get("asked", 0)), q["id"]))


Resume = Callable[[str, str], Awaitable[None]]
"""Enqueue the resume of run (id, root)."""


async def deadline_of(client: aioredis.Redis, keys: Keys, root: str, qid: str) -> float | None:
    """When question ``qid`` of tree ``root`` times out (epoch seconds), from the one deadline
    index every enforcer reads (``tree_questions_due``); None when it has no limit or is closed."""
    with redis_errors("questions"):
        score = await client.zscore(keys.tree_questions_due(root), qid)
    return None if score is None else score / 1000


async def time_out(client: aioredis.Redis, keys: Keys, root: str, qid: str, *, retention: int,
                   requeue_after: float) -> Answered:
    """Answer question ``qid`` of tree ``root`` with the timeout error result (Shelly's text,
    :func:`~shelly_dist.tools.builtin.ask.timeout_error`, with the question's own limit), unless
    an answer won the race (the first answer wins). The one enforcer of ``question_timeout`` on the
    pool: the reapers call it for each question past its deadline (:func:`expire_due`), and a
    coordinator's top-level run calls it when its own wait reaches the same deadline, or stops
    waiting (:mod:`.root_answerer`)."""
    with redis_errors("questions"):
        raw = await client.hget(keys.tree_questions(root), qid)
        if raw is None:  # answered (or gone) meanwhile: drop its deadline, if left
            await client.zrem(keys.tree_questions_due(root), qid)
            return Answered("unknown", root=root)
    q = json.loads(raw)
    limit = float(q.get("timeout") or 0)
    return await _answer_in_tree(client, keys, str(q["session"]), root, qid, timeout_error(qid, limit),
                                 retention=retention, requeue_after=requeue_after, is_error=True)


async def expire_due(client: aioredis.Redis, keys: Keys, roots: list[str], *, retention: int,
                     requeue_after: float, resume: Resume) -> int:
    """Time out (:func:`time_out`) every question of the trees ``roots`` past its deadline (the
    reapers call this for the trees past their due hint); returns how many were expired here."""
    if not roots:
        return 0
    with redis_errors("questions"):
        async with client.pipeline(transaction=False) as pipe:
            for root in roots:
                pipe.zrangebyscore(keys.tree_questions_due(root), "-inf", _ms(time.time()), start=0, num=100)
            due = await pipe.execute()
    n = 0
    for root, qids in zip(roots, due, strict=True):
        for qid in qids:
            done = await time_out(client, keys, root, qid, retention=retention, requeue_after=requeue_after)
            if done.outcome == "ok":
                n += 1
                if done.resume:
                    await resume(done.run, done.root)
    return n


def require_open(found: Answered, qid: str, session: str) -> None:
    """A clear one-line error for an answer that went nowhere."""
    if found.outcome == "unknown":
        raise UsageError(f"answer: no open question {qid} in session {session} (see `shelly questions --session "
                         f"{session}`)")
    if found.outcome == "gone":
        raise UsageError(f"answer: question {qid} of session {session}: its run has ended")
