"""Interactive delegation on the pool: a child that asks waits suspended; the parent's model answers.

The children of an interactive ``delegate`` are dispatched and joined like any others (one entry
per child under its join key, ``<parent iteration>:<request key>``), with one difference: a child
whose ``request_input`` goes to its parent (:meth:`ChildRequest.asks_parent`) suspends on the call
(:func:`~shelly_dist.agent.interactive.suspend_question`), and ``control_scripts.ASK_PARENT`` joins its
question into the parent *as its entry for this round* — stored once, the parent's pending count
decremented once, its resume due when that was the last — while the child's own pending count
holds the unanswered call, so the child is released holding no worker.

``answer_delegation_questions`` (``control_scripts.ANSWER_CHILD``, fenced by the parent's lease) stores the
answer where the child's call awaits it, moves the child's join key to the parent's current round
and counts the child in the parent's pending again, in one step, then the child's resume is sent.
The resumed child, on any worker, delivers the answer as the call's result (:func:`collect`) and
goes on until it asks again or ends — either way joining the new round. Every write is idempotent
(a repeated step stores nothing twice and counts nothing twice), and the reaper's rules hold
unchanged: a join that completed without its resume sent is in the tree's deadline index.

When the parent's run ends, :func:`close` answers each child still waiting with an error result
and flags it stopped, so it ends at its next claim (Shelly cancels them) with
:data:`~shelly_dist.agent.stops.DELEGATION_CLOSED`, its task on the board ``failed``, and its own
descendants with it (:func:`.stops.stop_runs`).

Keys: the child's answers in ``…:run:{child}:children`` under ``ask:<iteration>:<call id>``, the
question in the parent's ``…:run:{parent}:children``; all of one tree (one hash tag).
"""

from __future__ import annotations

import json
import time

from shelly_dist.agent import Run
from shelly_dist.agent.interaction import REQUEST_INPUT, ChildQuestion
from shelly_dist.agent.interactive import question_entry
from shelly_dist.agent.records import ChildRequest, LiveDelegation
from shelly_dist.agent.stops import DELEGATION_CLOSED
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.runtime.celery.children import round_timeout
from shelly_dist.runtime.celery.children.questions import answer_field, result_of
from shelly_dist.runtime.celery.children.stops import stop_runs
from shelly_dist.runtime.celery.journal import Lease, child_key


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


async def ask_parent(lease: Lease, run: Run) -> str:
    """Join every awaiting ``request_input`` question of the leased child into its parent; returns
    the parent's run id when this completed its join and it must be resumed (else "")."""
    store, r = lease.store, lease.record
    keys, settings = store.keys, store.settings
    request = ChildRequest.model_validate_json(r.request) if r.request else None
    resume = ""
    for call_id, payload in run.state.awaiting.items():
        if payload.get("kind") != REQUEST_INPUT or request is None or not r.parent:
            continue
        field = answer_field(run.state.iteration, call_id)
        question = ChildQuestion.model_validate(payload["question"])
        entry = question_entry(request, question, {"run": r.id, "field": field})
        script = store.control.ask_parent  # control_scripts.ASK_PARENT
        resume_at = _ms(time.time() + settings.requeue_after)
        left, mode = await store.run_script(
            script,
            [keys.run(r.id), keys.run_lease(r.id), keys.run(r.parent), keys.run_children(r.parent),
             keys.tree_deadlines(r.root), keys.run_children(r.id)],
            [lease.token, field, json.dumps(entry.journal_json()), settings.retention, resume_at, r.parent],
            hint=(r.root, resume_at),
        )
        if int(left) == 0 and str(mode) == "worker":
            resume = r.parent
    return resume


async def collect(lease: Lease, run: Run) -> None:
    """Deliver every parent's answer that has arrived as its ``request_input`` call's result."""
    calls = [c for c, p in run.state.awaiting.items() if p.get("kind") == REQUEST_INPUT]
    if not calls:
        return
    store = lease.store
    fields = [answer_field(run.state.iteration, c) for c in calls]
    with redis_errors("journal"):
        raw = await store.client.hmget(store.keys.run_children(run.state.run_id), fields)
    for call_id, value in zip(calls, raw, strict=True):
        if value:
            run.deliver_result(call_id, result_of(value))


async def send_answers(lease: Lease, delegations: list[LiveDelegation], answers: list[str], iteration: int,
                       *, is_error: bool = False, stop: str = "", limit: float = 0.0) -> list[str]:
    """Answer each waiting child from the leased parent (its next event joins round ``iteration``,
    within ``limit`` seconds when above 0, unless ``stop``: the parent is closing); returns the
    child run ids whose resume is due."""
    store, parent = lease.store, lease.record
    keys, settings = store.keys, store.settings
    script = store.control.answer_child  # control_scripts.ANSWER_CHILD
    due = []
    for d, text in zip(delegations, answers, strict=True):
        child = d.reply_to.get("run", "")
        if not child:
            continue
        gone = json.dumps({"agent": d.request.agent, "error": DELEGATION_CLOSED})
        resume_at = _ms(time.time() + settings.requeue_after)
        out = await store.run_script(
            script,
            [keys.run(parent.id), keys.run_lease(parent.id), keys.run_children(parent.id), keys.run(child),
             keys.run_children(child), keys.tree_deadlines(parent.root)],
            [lease.token, d.reply_to.get("field", ""), json.dumps({"content": text, "is_error": is_error}),
             settings.retention, "" if stop else child_key(d.request, iteration), resume_at, child, stop, gone],
            hint=(parent.root, resume_at),
        )
        if str(out[0]) == "ok" and int(out[1]) == 0:
            due.append(child)
        if stop and str(out[0]) != "gone":
            await stop_runs(store.client, keys, [], stop, flagged=[child])
    if not stop:
        await round_timeout.watch(lease, [d.request for d in delegations],
                                  [d.reply_to.get("run", "") for d in delegations], iteration, limit)
    return due


async def close(lease: Lease, delegations: list[LiveDelegation]) -> list[str]:
    """The parent's run ended: stop every child still waiting for its answer (each ends
    ``canceled`` at its next claim, its entry :data:`DELEGATION_CLOSED`); returns the child run ids
    to resume so they end now."""
    texts = [DELEGATION_CLOSED] * len(delegations)
    return await send_answers(lease, delegations, texts, 0, is_error=True, stop=DELEGATION_CLOSED)


__all__ = ["ask_parent", "close", "collect", "send_answers"]
