"""Suspended model calls on the pool: the run lets its worker go, and comes back when the call is
due or when its reply is delivered from any process.

A run whose model call raised :class:`~shelly_dist.models.suspend.SuspendModel` has the wait
journaled in its state (``RunState.model_wait``). :func:`suspend` then lets the run go
(``control_scripts.MODEL_SUSPEND``): ``waiting``, holding no worker slot and no ``max_concurrency``
slot, with a deadline at the wait's due time in the tree's deadline index — the reapers' due index
(:mod:`..journal.due`) resumes it then, at a cost that follows what is due, not what waits (DESIGN §3 rule
17). A wait with no due time has no deadline: only a delivery ends it.

:func:`deliver` is how another process answers a suspended call (a vendor batch's poller): the
reply, with its usage priced in its metadata, is stored once under the run's children hash
(``model:<wait id>``, the wait's own field, so a delivery for an earlier suspension of the same
call is never taken for this one), the run's channel is published, and a waiting worker-driven run
is made due and resumed. A run being advanced when its reply lands takes it before it lets go:
``MODEL_SUSPEND`` looks for the reply in the same atomic step, and answers "go on" when it is
there. :func:`collect` hands a stored reply to the run (``Run.deliver_reply``) when it comes back.

A coordinator's own top-level run waits in its process instead (:func:`wait_in_coordinator`), on
its channel and its due time, holding nothing on the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

import redis.asyncio as aioredis

from shelly_dist.agent import Run
from shelly_dist.chats import Message
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.hub import Watch
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.journal.due import DueIndex
from shelly_dist.runtime.celery.journal.lease import Lease
from shelly_dist.runtime.celery.journal.registry import registered
from shelly_dist.runtime.celery.journal.store import run_script

__all__ = ["Delivered", "collect", "deliver", "field_of", "suspend", "wait_in_coordinator"]


def field_of(wait_id: str) -> str:
    """Where the reply of wait ``wait_id`` is stored in its run's children hash."""
    return f"model:{wait_id}"


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


async def collect(client: aioredis.Redis, keys: Keys, run: Run) -> None:
    """Hand the run the reply delivered for its current model wait, if one was (one read)."""
    wait = run.state.model_wait
    if wait is None or wait.reply is not None:
        return
    with redis_errors("journal"):
        raw = await client.hget(keys.run_children(run.state.run_id), field_of(wait.id))
    if raw is not None:
        run.deliver_reply(wait.id, Message.model_validate_json(raw))


async def suspend(lease: Lease, run: Run) -> bool:
    """Let the leased run go while its model call waits (see the module); False when its reply was
    delivered meanwhile (the lease is kept: collect it and go on)."""
    wait = run.state.model_wait
    assert wait is not None
    store, r = lease.store, lease.record
    keys = [store.keys.run(r.id), store.keys.run_lease(r.id), store.keys.run_children(r.id),
            store.keys.tree_deadlines(r.root)]
    due_ms = _ms(wait.due_at) if wait.due_at is not None else 0
    args = [lease.token, field_of(wait.id), r.id, due_ms, wait.reason or wait.kind, str(time.time())]
    store.renewer.release(lease)  # the script ends the lease: a renewal after it must not call it lost
    let_go = int(await store.run_script(store.control.model_suspend, keys, args,
                                        hint=(r.root, due_ms) if due_ms else None))
    if not let_go:
        task = asyncio.current_task()
        if task is not None:
            store.renewer.hold(lease, task)
    return bool(let_go)


@dataclass
class Delivered:
    """What a delivery did: ``resume`` (stored; the run was made due, the caller resumed it),
    ``stored`` (the run takes it when it next looks: being advanced, or a coordinator's), ``duplicate``
    (a reply was delivered for this wait already: nothing changed) or ``gone`` (no such run, or it
    has ended)."""

    outcome: str
    run: str = ""
    root: str = ""


async def deliver(
    client: aioredis.Redis, keys: Keys, run_id: str, wait_id: str, reply: Message, *, retention: int,
    requeue_after: float,
) -> Delivered:
    """Deliver ``reply`` (its usage, priced, in its metadata) for the suspended model call
    ``wait_id`` of run ``run_id``, from any process; exactly once per wait. The caller enqueues the
    run's resume when the outcome is ``resume`` (``executor.enqueue_resume``); if it dies first,
    the reapers resume it after ``requeue_after``."""
    with redis_errors("model waits"):
        root = await client.hget(keys.run(run_id), "root")
    if root is None:
        return Delivered("gone", run_id)
    resume_at = _ms(time.time() + requeue_after)
    out = await run_script(
        registered(client).control.model_deliver,  # control_scripts.MODEL_DELIVER
        [keys.run(run_id), keys.run_children(run_id), keys.tree_deadlines(root), keys.run_lease(run_id)],
        [field_of(wait_id), reply.model_dump_json(), retention, resume_at, run_id, wait_id],
        hint=(root, resume_at), due=DueIndex(client, keys, retention), origin="model waits")
    return Delivered(str(out[0]), run_id, root)


async def wait_in_coordinator(client: aioredis.Redis, keys: Keys, run: Run, wakeups: Watch) -> None:
    """A coordinator's top-level run waits here for its suspended model call: until it is due, or
    until a reply delivered for it is read (re-read on every wake-up of the run's channel and every
    poll tick: the channel is a hint, the children hash the truth)."""
    while run.model_waiting():
        seen = wakeups.generation
        await collect(client, keys, run)
        wait = run.state.model_wait
        if wait is None or wait.over():
            return
        timeout = None if wait.due_at is None else max(0.0, wait.due_at - time.time())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await wakeups.moved(seen)
