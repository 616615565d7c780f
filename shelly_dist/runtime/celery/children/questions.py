"""Decisions on the pool — ``ask_user`` questions and approvals of gated tool calls: a decision
suspends its run durably, an answer from anywhere resumes it.

A run on a worker that calls ``ask_user``, or whose gated tool call needs a person's approval
(:mod:`shelly_dist.agent.approval`), does not wait in its worker slot. The call is journaled as
awaiting (:class:`~shelly_dist.tools.suspend.SuspendCall`), then :func:`register` numbers the
decision for the session (``q-N`` for questions, ``a-N`` for approvals, unique across workers),
lists it among the session's open decisions and in the pool-wide decision index, and counts it in
the run's ``pending`` like a child, so the run is released (``waiting``) exactly as a run waiting
on its children is. An answer — ``shelly answer``/``approve``/``reject``, ``Session.respond``/
``approve``/``reject``, or the reaper's timeout — is joined into the run the way a child's entry is
(``control_scripts.ANSWER``): stored once under the run's children hash, the pending count
decremented once, the run's channel published; the caller that brings the count to zero enqueues
the resume (and the same step puts the run in the tree's deadline index, so the reaper resumes it
if that caller dies first). The resumed run, on any worker, delivers the stored answer as the
call's result, or the stored verdict to the gate (:meth:`~shelly_dist.agent.Run.deliver_decision`).

A coordinator's top-level run asks through :class:`~.root_answerer.RootAnswerer`: the coordinator
process holds no worker, so it registers the decision the same way and waits on the run's channel.

Deadlines (``options.question_timeout``, ``approval.timeout``) are enforced by the reapers: a
decision with a deadline is indexed in its tree's ``…:questions:due`` (and the tree hinted in the
due index, :mod:`.due`); the reaper that scans the tree's shard answers the decisions past it
(:func:`expire_due`: a question with the timeout error result, an approval with the rejection
``approval timed out``), so the deadline holds whichever worker, if any, is alive when it passes.

A verdict given ``--always`` sticks for its tool in the decision's batch, else its session
(``Keys.always``): :func:`register` reads it before registering an approval and applies it at
once, without a suspension.

Keys (all with the retention TTL, built by :class:`~shelly_dist.redisio.keys.Keys`): the decision
lives in its *tree's* slot — ``tree_questions`` (open decisions, id → JSON), ``tree_questions_due``
(their deadlines), ``run_asked`` (the run's decisions by call, so a repeated step registers nothing
twice), answers in ``run_children`` under ``ask:<iteration>:<call id>`` — so each script touches
one slot, passed in ``KEYS`` (a Redis Cluster runs them). The session's and the pool's keys are
written by plain commands around the scripts: ``question_counter``/``approval_counter`` number
them across the session's trees, ``session_questions`` maps an open id to its tree, and
``decisions(kind)`` indexes every open decision of the pool (written after the decision, every
time a step registers it; dropped after the answer — an entry whose decision is gone lists
nothing and is dropped by the next listing), so ``shelly decisions`` costs O(pending).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from shelly_dist import events
from shelly_dist.agent import Run
from shelly_dist.chats import ToolResult
from shelly_dist.errors import UsageError
from shelly_dist.observability import metrics
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.journal import TERMINAL, Lease
from shelly_dist.runtime.celery.journal.due import DueIndex
from shelly_dist.runtime.celery.journal.registry import registered
from shelly_dist.runtime.celery.journal.store import run_script
from shelly_dist.tools.builtin.ask import ASK_USER, Question, timeout_error
from shelly_dist.tools.decisions import APPROVAL, QUESTION, Approval, Verdict, timed_out

__all__ = ["KINDS", "Answered", "Registered", "answer", "answer_field", "ask", "collect", "deadline_of",
           "expire_due", "open_decisions", "open_questions", "pending_counts", "register", "require_open", "sticky",
           "time_out"]

KINDS = (QUESTION, APPROVAL)
"""The decision kinds of the index (a vote of the team workspace is not one yet)."""

SUSPENDED_AS = {ASK_USER: QUESTION, APPROVAL: APPROVAL}
"""A suspended call's kind (``RunState.awaiting``) → the decision kind it waits for."""

QUESTION_FIELDS = ("text", "options", "header", "multiSelect", "maxSelections")


def answer_field(iteration: int, call_id: str) -> str:
    """Where a call's answer joins the run (unique per suspension, as a child's key)."""
    return f"ask:{iteration}:{call_id}"


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def result_of(raw: str) -> ToolResult:
    data = json.loads(raw)
    return ToolResult(tool_call_id="", content=str(data.get("content", "")), is_error=bool(data.get("is_error")))


def _index_member(session: str, qid: str, root: str) -> str:
    return f"{session} {qid} {root}"


@dataclass
class Registered:
    """What registering a decision did: its ``id``, whether it is ``new``, and for an approval of
    a tool with a sticky verdict, that verdict (``sticky``: nothing was registered)."""

    id: str = ""
    new: bool = False
    sticky: Verdict | None = None


async def sticky(client: aioredis.Redis, keys: Keys, session: str, batch: str, tool: str) -> Verdict | None:
    """The ``--always`` verdict for ``tool`` in ``batch`` (when the session runs a batch item), else
    in ``session``; ``None`` when there is none."""
    scopes = ([f"batch:{batch}"] if batch else []) + [f"s:{session}"]
    with redis_errors("decisions"):
        async with client.pipeline(transaction=False) as pipe:
            for scope in scopes:
                pipe.hget(keys.always(scope), tool)
            found = await pipe.execute()
    raw = next((f for f in found if f), None)
    if raw is None:
        return None
    return Verdict.model_validate_json(raw).model_copy(update={"always": False, "by": "always"})


async def ask(lease: Lease, agent: str, run_id: str, field: str, payload: dict[str, Any], *,
              kind: str = QUESTION, path: list[str] | None = None) -> Registered:
    """Register one decision of the leased run (an ``ask_user`` question, or with ``kind``
    ``approval`` a gated call's approval); idempotent per ``field``. An approval of a tool with a
    sticky verdict is not registered: its verdict comes back at once."""
    store, r = lease.store, lease.record
    keys, settings, client = store.keys, store.settings, store.client
    timeout = float(payload.get("timeout") or 0)
    now = time.time()
    with redis_errors("questions"):
        async with client.pipeline(transaction=False) as pipe:
            pipe.hget(keys.run_asked(run_id), field)
            pipe.get(keys.session_batch(r.session))
            known, batch = await pipe.execute()
        batch = batch or ""
        if known is None and kind == APPROVAL:
            found = await sticky(client, keys, r.session, batch, str(payload.get("tool", "")))
            if found is not None:
                return Registered(sticky=found)
        counter = keys.approval_counter if kind == APPROVAL else keys.question_counter
        qid = known or f"{kind[0]}-{await client.incr(counter(r.session))}"  # a number a dead step took: a gap
    if kind == APPROVAL:
        decision: dict[str, Any] = {"tool": str(payload.get("tool", "")),
                                    "arguments": str(payload.get("arguments", "{}"))}
    else:
        decision = {k: payload[k] for k in QUESTION_FIELDS if payload.get(k)} | {"text": str(payload.get("text", ""))}
    decision |= {"kind": kind, "agent": agent, "run": run_id, "root": r.root, "session": r.session, "field": field,
                 "asked": now, "timeout": timeout, "path": path or [agent]}
    if batch:
        decision["batch"] = batch
    due = _ms(now + timeout) if timeout else 0
    out = await store.run_script(
        store.control.ask,  # control_scripts.ASK
        [keys.run(run_id), keys.run_lease(run_id), keys.run_asked(run_id), keys.tree_questions(r.root),
         keys.tree_questions_due(r.root)],
        [lease.token, field, qid, json.dumps(decision), settings.retention, due],
        hint=(r.root, due) if due else None,
    )
    qid, new, still_open = str(out[0]), int(out[1]) == 1, int(out[2]) == 1
    if still_open:
        # The session's and the pool's indexes are other slots than the tree: written after the
        # script, every time (idempotent), so a step that died in between and runs again repairs them.
        index = keys.decisions(kind)
        with redis_errors("questions"):
            async with client.pipeline(transaction=False) as pipe:
                pipe.hset(keys.session_questions(r.session), qid, r.root)
                pipe.expire(keys.session_questions(r.session), settings.retention)
                pipe.expire(counter(r.session), settings.retention)
                pipe.zadd(index, {_index_member(r.session, qid, r.root): _ms(now)}, nx=True)
                pipe.expire(index, settings.retention)
                await pipe.execute()
    return Registered(qid, new)


async def register(lease: Lease, run: Run) -> None:
    """Register every awaiting decision of the leased run — ``ask_user`` calls and approvals —
    (idempotent: a decision already registered keeps its id) and announce the new ones with an
    ``ask_user`` or ``approval_requested`` event. An approval with a sticky verdict is decided
    at once instead."""
    path = [*run.state.path, run.agent.name]
    for call_id, payload in list(run.state.awaiting.items()):
        kind = SUSPENDED_AS.get(str(payload.get("kind")))
        if kind is None:
            continue
        payload.setdefault("asked", time.time())
        field = answer_field(run.state.iteration, call_id)
        done = await ask(lease, run.agent.name, run.state.run_id, field, payload, kind=kind, path=path)
        if done.sticky is not None:
            run.deliver_decision(call_id, done.sticky)
            continue
        payload["id"] = done.id
        if not done.new:
            continue
        if kind == APPROVAL:
            approval = Approval.model_validate({**payload, "id": done.id, "path": path})
            run.emit(events.APPROVAL_REQUESTED, **approval.event_data())
        else:
            run.emit(events.ASK_USER, **Question.model_validate({**payload, "id": done.id}).event_data())


async def collect(lease: Lease, run: Run) -> None:
    """Deliver every answer that has joined into the run: an answer as its call's result, a
    verdict to the gate."""
    calls = [(c, p) for c, p in run.state.awaiting.items() if p.get("kind") in SUSPENDED_AS]
    if not calls:
        return
    fields = [answer_field(run.state.iteration, c) for c, _ in calls]
    store = lease.store
    with redis_errors("journal"):
        raw = await store.client.hmget(store.keys.run_children(run.state.run_id), fields)
    for (call_id, payload), value in zip(calls, raw, strict=True):
        if not value:
            continue
        if payload.get("kind") == APPROVAL:
            verdict = Verdict.parse(str(json.loads(value).get("content", "")))
            run.deliver_decision(call_id, verdict, decision_id=str(payload.get("id", "")))
        else:
            run.deliver_result(call_id, result_of(value))
            metrics.decided(QUESTION, float(payload.get("asked") or 0), by=str(json.loads(value).get("by", "")))


@dataclass
class Answered:
    """What answering a decision did: ``ok``, ``unknown`` (no such open decision) or ``gone``
    (its run has ended); ``resume`` names the run to enqueue when this answer completed its join;
    ``decision`` is the decision as it was listed."""

    outcome: str
    run: str = ""
    root: str = ""
    resume: bool = False
    decision: dict[str, Any] = field(default_factory=dict)


async def answer(
    client: aioredis.Redis, keys: Keys, session: str, qid: str, text: str, *, retention: int,
    requeue_after: float, is_error: bool = False, by: str = "",
) -> Answered:
    """Answer decision ``qid`` of ``session`` (from any process): a question with ``text``, an
    approval with a verdict's text (:meth:`~shelly_dist.tools.decisions.Verdict.to_text`, or a
    person's ``yes``/``no``; anything else is a ``UsageError``). The first answer wins."""
    with redis_errors("questions"):
        root = await client.hget(keys.session_questions(session), qid)
    if root is None:
        return Answered("unknown")
    return await _answer_in_tree(client, keys, session, root, qid, text, retention=retention,
                                 requeue_after=requeue_after, is_error=is_error, by=by)


async def _answer_in_tree(
    client: aioredis.Redis, keys: Keys, session: str, root: str, qid: str, text: str, *, retention: int,
    requeue_after: float, is_error: bool, by: str = "",
) -> Answered:
    """Join the answer into the tree (one script, one slot), then drop the decision from the
    session's index and the pool's (other slots; an entry left by a crash in between lists nothing,
    its decision being gone from the tree). A sticky verdict (``always``) is kept for its tool."""
    with redis_errors("questions"):
        raw = await client.hget(keys.tree_questions(root), qid)
        out: list[Any] = ["unknown"]
        run_id, q = "", {}
        verdict: Verdict | None = None
        if raw is not None:
            q = json.loads(raw)
            run_id = str(q["run"])
            if q.get("kind") == APPROVAL:
                try:
                    verdict = Verdict.parse(text, by=by)
                except ValueError as exc:
                    raise UsageError(f"answer: {qid} of session {session} is an approval: {exc}") from None
                text = verdict.to_text()
            resume_at = _ms(time.time() + requeue_after)
            out = await run_script(
                registered(client).control.answer,  # control_scripts.ANSWER
                [keys.tree_questions(root), keys.run(run_id), keys.run_children(run_id),
                 keys.tree_deadlines(root), keys.tree_questions_due(root)],
                [qid, json.dumps({"content": text, "is_error": is_error, "by": by}), q["field"], retention,
                 resume_at, run_id],
                hint=(root, resume_at), due=DueIndex(client, keys, retention), origin="questions",
            )
        async with client.pipeline(transaction=False) as pipe:
            pipe.hdel(keys.session_questions(session), qid)
            pipe.zrem(keys.decisions(str(q.get("kind") or QUESTION)), _index_member(session, qid, root))
            if verdict is not None and verdict.always and str(out[0]) == "ok":
                scope = keys.always(f"batch:{q['batch']}" if q.get("batch") else f"s:{session}")
                pipe.hset(scope, str(q["tool"]), verdict.to_text())
                pipe.expire(scope, retention)
            await pipe.execute()
    outcome = str(out[0])
    listed = _listing(qid, q) if q else {}
    if outcome != "ok":
        return Answered(outcome, run_id, root, decision=listed)
    return Answered("ok", run_id, root, resume=int(out[1]) == 0 and str(out[2]) == "worker", decision=listed)


def _listing(qid: str, q: dict[str, Any]) -> dict[str, Any]:
    """A decision as ``shelly decisions --json`` shows it (docs/reference.md, "Decisions")."""
    kind = str(q.get("kind") or QUESTION)
    asked, timeout = float(q.get("asked") or 0), float(q.get("timeout") or 0)
    out: dict[str, Any] = {"id": qid, "kind": kind, "session": q.get("session", ""), "run": q.get("run", ""),
                           "path": list(q.get("path") or [q.get("agent", "")]), "agent": q.get("agent", ""),
                           "asked": asked, "timeout": timeout, "times_out": asked + timeout if timeout else None}
    if q.get("batch"):
        out["batch"] = q["batch"]
    if kind == APPROVAL:
        out["tool"] = q.get("tool", "")
        out["arguments"] = Approval(tool=str(out["tool"]), arguments=str(q.get("arguments", "{}"))).parsed_arguments()
    else:
        out["text"] = q.get("text", "")
        out["options"] = list(q.get("options") or [])
        out |= {k: q[k] for k in ("header", "multiSelect", "maxSelections") if q.get(k)}
    return out


async def open_decisions(client: aioredis.Redis, keys: Keys, *, session: str | None = None) -> list[dict[str, Any]]:
    """Every open decision whose run still waits — of ``session``, or of the whole pool — oldest
    first, as :func:`_listing` shapes them. Reads O(pending): the session's index, or the pool's
    (``Keys.decisions``), then each decision and its run's status; an index entry whose decision
    is gone (answered, or its tree expired) is dropped on the way."""
    with redis_errors("questions"):
        if session is not None:
            index = await client.hgetall(keys.session_questions(session))
            found = [(session, qid, root) for qid, root in index.items()]
        else:
            async with client.pipeline(transaction=False) as pipe:
                for kind in KINDS:
                    pipe.zrange(keys.decisions(kind), 0, -1)
                members = [m for ms in await pipe.execute() for m in ms]
            found = [tuple(m.split(" ", 2)) for m in members if m.count(" ") == 2]  # type: ignore[misc]
        async with client.pipeline(transaction=False) as pipe:
            for _, qid, root in found:
                pipe.hget(keys.tree_questions(root), qid)
            raws = await pipe.execute()
        stale = [(s, qid, root) for (s, qid, root), raw in zip(found, raws, strict=True) if raw is None]
        live = [(qid, json.loads(raw)) for (_, qid, _), raw in zip(found, raws, strict=True) if raw is not None]
        async with client.pipeline(transaction=False) as pipe:
            for _, q in live:
                pipe.hget(keys.run(q["run"]), "status")
            if session is None:
                for kind in KINDS:  # an entry of either kind: drop both spellings
                    for s, qid, root in stale:
                        pipe.zrem(keys.decisions(kind), _index_member(s, qid, root))
            answers = await pipe.execute()
    statuses = answers[:len(live)]
    out = [_listing(qid, q) for (qid, q), status in zip(live, statuses, strict=True)
           if status is not None and status not in TERMINAL]
    return sorted(out, key=lambda q: (q["asked"], q["session"], q["id"]))


async def pending_counts(client: aioredis.Redis, keys: Keys) -> dict[str, int]:
    """How many decisions of each kind the pool-wide index holds (one round trip; entries a crash
    left behind count until a listing drops them)."""
    with redis_errors("questions"):
        async with client.pipeline(transaction=False) as pipe:
            for kind in KINDS:
                pipe.zcard(keys.decisions(kind))
            counts = await pipe.execute()
    return {kind: int(n) for kind, n in zip(KINDS, counts, strict=True)}


async def open_questions(client: aioredis.Redis, keys: Keys, session: str) -> list[dict[str, Any]]:
    """The session's unanswered ``ask_user`` questions whose run still waits, oldest first:
    ``{id, agent, run, text, options, asked, timeout, …}`` (``shelly questions``)."""
    keep = ("id", "agent", "run", "text", "options", "header", "multiSelect", "maxSelections", "asked", "timeout")
    return [{k: q[k] for k in keep if k in q}
            for q in await open_decisions(client, keys, session=session) if q["kind"] == QUESTION]


Resume = Callable[[str, str], Awaitable[None]]
"""Enqueue the resume of run (id, root)."""


async def deadline_of(client: aioredis.Redis, keys: Keys, root: str, qid: str) -> float | None:
    """When decision ``qid`` of tree ``root`` times out (epoch seconds), from the one deadline
    index every enforcer reads (``tree_questions_due``); None when it has no limit or is closed."""
    with redis_errors("questions"):
        score = await client.zscore(keys.tree_questions_due(root), qid)
    return None if score is None else score / 1000


async def time_out(client: aioredis.Redis, keys: Keys, root: str, qid: str, *, retention: int,
                   requeue_after: float) -> Answered:
    """Answer decision ``qid`` of tree ``root`` as timed out — a question with the timeout error
    result (Shelly's text, :func:`~shelly_dist.tools.builtin.ask.timeout_error`, with its own
    limit), an approval with the rejection ``approval timed out`` — unless an answer won the race
    (the first answer wins). The one enforcer of the deadlines on the pool: the reapers call it for
    each decision past its deadline (:func:`expire_due`), and a coordinator's top-level run calls it
    when its own wait reaches the same deadline, or stops waiting (:mod:`.root_answerer`)."""
    with redis_errors("questions"):
        raw = await client.hget(keys.tree_questions(root), qid)
        if raw is None:  # answered (or gone) meanwhile: drop its deadline, if left
            await client.zrem(keys.tree_questions_due(root), qid)
            return Answered("unknown", root=root)
    q = json.loads(raw)
    if q.get("kind") == APPROVAL:
        text, is_error = timed_out().to_text(), False
    else:
        text, is_error = timeout_error(qid, float(q.get("timeout") or 0)), True
    return await _answer_in_tree(client, keys, str(q["session"]), root, qid, text, retention=retention,
                                 requeue_after=requeue_after, is_error=is_error, by="timeout")


async def expire_due(client: aioredis.Redis, keys: Keys, roots: list[str], *, retention: int,
                     requeue_after: float, resume: Resume) -> int:
    """Time out (:func:`time_out`) every decision of the trees ``roots`` past its deadline (the
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


def require_open(found: Answered, qid: str, session: str, what: str = "answer") -> None:
    """A clear one-line error for an answer that went nowhere (``what``: the command)."""
    noun = "question" if qid.startswith("q-") else "decision"
    if found.outcome == "unknown":
        raise UsageError(f"{what}: no open {noun} {qid} in session {session} (see `shelly decisions --session "
                         f"{session}`)")
    if found.outcome == "gone":
        raise UsageError(f"{what}: {noun} {qid} of session {session}: its run has ended")
