"""``ask_user`` on the pool: a question suspends its run durably, an answer from anywhere resumes it.

A run on a worker that calls ``ask_user`` does not wait in its worker slot. The tool call is
journaled as awaiting (:class:`~shelly_dist.tools.suspend.SuspendCall`), then :func:`register`
numbers the question for the session (``q-N``, unique across workers), lists it among the session's
open questions and counts it in the run's ``pending`` like a child, so the run is released
(``waiting``) exactly as a run waiting on its children is. An answer — ``shelly answer``,
``Session.respond``, or the reaper's timeout — is joined into the run the way a child's entry is
(:data:`ANSWER`): stored once under the run's children hash, the pending count decremented once,
the run's channel published; the caller that brings the count to zero enqueues the resume (and the
same step puts the run in the tree's deadline index, so the reaper resumes it if that caller dies
first). The resumed run, on any worker, delivers the stored answer as the call's result.

A coordinator's top-level run asks through :class:`~.root_answerer.RootAnswerer`: the coordinator
process holds no worker, so it registers the question the same way and waits on the run's channel.

``options.question_timeout`` is enforced by the reapers: a question with a deadline is indexed in
``…:questions:due``; each reaper scan answers the questions past it with the timeout error result
(:func:`expire_due`), so the deadline holds whichever worker, if any, is alive when it passes
(late by at most ``reap_interval`` when a worker is up, at the next scan otherwise).

Keys (all with the retention TTL, every one passed in ``KEYS``):
``…:s:{session}:questions`` (open questions, id → JSON), ``…:s:{session}:qn`` (the id counter),
``…:run:{id}:asked`` (the run's questions by call, so a repeated step registers nothing twice),
answers in ``…:run:{id}:children`` under ``ask:<iteration>:<call id>``, ``…:questions:due``.
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
from shelly_dist.runtime.celery.lease import Lease
from shelly_dist.runtime.celery.scripts import _FENCE
from shelly_dist.state.connection import redis_errors
from shelly_dist.state.keys import Keys
from shelly_dist.tools.builtin.ask import ASK_USER, Question, timeout_error

__all__ = ["ANSWER", "ASK", "Answered", "answer", "answer_field", "ask", "collect", "expire_due", "open_questions",
           "register", "require_open"]

ASK = _FENCE + """
local record, lease, asked, questions, counter, due = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local token, field, question, retention = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local due_ms, session = tonumber(ARGV[5]), ARGV[6]
if not holds(record, lease, token) then return lost(record) end
local qid = redis.call('HGET', asked, field)
if qid then return {qid, 0} end
qid = 'q-' .. redis.call('INCR', counter)
redis.call('EXPIRE', counter, retention)
redis.call('HSET', asked, field, qid)
redis.call('EXPIRE', asked, retention)
redis.call('HSET', questions, qid, question)
redis.call('EXPIRE', questions, retention)
redis.call('HINCRBY', record, 'pending', 1)
if due_ms > 0 then
  redis.call('ZADD', due, due_ms, session .. '\\n' .. qid)
  redis.call('EXPIRE', due, retention)
end
return {qid, 1}
"""
"""Register one awaiting ``ask_user`` call of the leased run (fenced; idempotent per call)."""

ANSWER = """
local questions, record, children, deadlines, due = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local qid, answer, field, retention = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local resume_at, run_id, member = ARGV[5], ARGV[6], ARGV[7]
if redis.call('HEXISTS', questions, qid) == 0 then return {'unknown'} end
redis.call('HDEL', questions, qid)
redis.call('ZREM', due, member)
if redis.call('EXISTS', record) == 0 then return {'gone'} end
local status = redis.call('HGET', record, 'status')
if status == 'done' or status == 'failed' or status == 'canceled' then return {'gone'} end
if redis.call('HSETNX', children, field, answer) == 0 then return {'unknown'} end
redis.call('EXPIRE', children, retention)
local left = redis.call('HINCRBY', record, 'pending', -1)
redis.call('PUBLISH', record .. ':changed', 'answer')
local mode = redis.call('HGET', record, 'mode') or ''
if left == 0 and mode == 'worker' then
  redis.call('ZADD', deadlines, resume_at, run_id)
  redis.call('EXPIRE', deadlines, retention)
end
return {'ok', left, mode}
"""
"""Join an answer into the asking run, once (the first answer wins; a timeout is an answer)."""


def questions_key(keys: Keys, session: str) -> str:
    return f"{keys.session(session)}:questions"


def _counter_key(keys: Keys, session: str) -> str:
    return f"{keys.session(session)}:qn"


def _asked_key(keys: Keys, run_id: str) -> str:
    return f"{keys.run(run_id)}:asked"


def _due_key(keys: Keys) -> str:
    return f"{keys.prefix}questions:due"


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
    journal, r = lease.journal, lease.record
    keys, settings = journal.keys, journal.settings
    timeout = float(payload.get("timeout") or 0)
    now = time.time()
    question = {k: payload[k] for k in ("text", "options", "header", "multiSelect", "maxSelections") if payload.get(k)}
    question |= {"text": str(payload.get("text", "")), "agent": agent, "run": run_id, "root": r.root,
                 "field": field, "asked": now, "timeout": timeout}
    script = journal.client.register_script(ASK)
    out = await journal._run_script(
        script,
        [keys.run(run_id), keys.run_lease(run_id), _asked_key(keys, run_id), questions_key(keys, r.session),
         _counter_key(keys, r.session), _due_key(keys)],
        [lease.token, field, json.dumps(question), settings.retention, _ms(now + timeout) if timeout else 0,
         r.session],
    )
    return str(out[0]), int(out[1]) == 1


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
    journal = lease.journal
    with redis_errors("journal"):
        raw = await journal.client.hmget(journal.keys.run_children(run.state.run_id), fields)
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
        raw = await client.hget(questions_key(keys, session), qid)
    if raw is None:
        return Answered("unknown")
    q = json.loads(raw)
    run_id, root = str(q["run"]), str(q["root"])
    script = client.register_script(ANSWER)
    with redis_errors("questions"):
        out = await script(
            keys=[questions_key(keys, session), keys.run(run_id), keys.run_children(run_id),
                  keys.tree_deadlines(root), _due_key(keys)],
            args=[qid, json.dumps({"content": text, "is_error": is_error}), q["field"], retention,
                  _ms(time.time() + requeue_after), run_id, f"{session}\n{qid}"],
        )
    outcome = str(out[0])
    if outcome != "ok":
        return Answered(outcome, run_id, root)
    return Answered("ok", run_id, root, resume=int(out[1]) == 0 and str(out[2]) == "worker")


async def open_questions(client: aioredis.Redis, keys: Keys, session: str) -> list[dict[str, Any]]:
    """The session's unanswered questions whose run still waits, oldest first:
    ``{id, agent, run, text, options, …}``."""
    with redis_errors("questions"):
        raw = await client.hgetall(questions_key(keys, session))
        found = [{"id": qid, **json.loads(v)} for qid, v in raw.items()]
        async with client.pipeline(transaction=False) as pipe:
            for q in found:
                pipe.hget(keys.run(q["run"]), "status")
            statuses = await pipe.execute()
    out = []
    for q, status in zip(found, statuses, strict=True):
        if status is None or status in ("done", "failed", "canceled"):
            continue
        q.setdefault("options", [])
        q.pop("field", None)
        out.append(q)
    return sorted(out, key=lambda q: (float(q.get("asked", 0)), q["id"]))


Resume = Callable[[str, str], Awaitable[None]]
"""Enqueue the resume of run (id, root)."""


async def expire_due(client: aioredis.Redis, keys: Keys, *, retention: int, requeue_after: float,
                     resume: Resume) -> int:
    """Answer every question past its ``question_timeout`` with the timeout error result (the
    reapers call this each scan); returns how many were expired here."""
    with redis_errors("questions"):
        due = await client.zrangebyscore(_due_key(keys), "-inf", _ms(time.time()), start=0, num=100)
    n = 0
    for member in due:
        session, _, qid = member.partition("\n")
        with redis_errors("questions"):
            raw = await client.hget(questions_key(keys, session), qid)
        if raw is None:
            with redis_errors("questions"):
                await client.zrem(_due_key(keys), member)
            continue
        limit = float(json.loads(raw).get("timeout") or 0)
        done = await answer(client, keys, session, qid, timeout_error(qid, limit), retention=retention,
                            requeue_after=requeue_after, is_error=True)
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
