"""``options.question_timeout`` of interactive delegation on the pool, kept by the reapers.

A parent waiting on a round of interactive children (its ``delegate``, or an
``answer_delegation_questions``) may be a suspended worker run that nobody drives, so the deadline
lives in Redis: :func:`watch` indexes each child's wait in ``Keys.delegations_due`` (scored by its
deadline), and every reaper scan (:func:`expire_due`) joins the timeout error (Shelly's text) as the
entry of each child that has neither asked nor ended by then — stored only if absent, the parent's
pending count decremented once, its resume due when that was the last (``control_scripts.ROUND_EXPIRE``) — and
flags the child stopped, so it ends ``canceled`` with Shelly's ``context canceled``, its task on the
board ``failed`` (a child that joins later changes nothing: its entry is refused), and its own
descendants with it (:func:`.stops.stop_runs`, the one stop of a subtree). A child in a step is woken on the cancel
channel; one suspended (on its own children, or on the user) is resumed to end. The deadline
holds late by at most ``reap_interval``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis

from shelly_dist.agent.interactive import timeout_text
from shelly_dist.agent.records import ChildRequest, DelegateEntry
from shelly_dist.agent.stops import DELEGATION_CLOSED
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.children.stops import stop_runs
from shelly_dist.runtime.celery.journal import Lease, child_key
from shelly_dist.runtime.celery.journal.due import DueIndex
from shelly_dist.runtime.celery.journal.registry import registered
from shelly_dist.runtime.celery.journal.store import run_script


async def watch(lease: Lease, requests: list[ChildRequest], children: list[str], iteration: int,
                limit: float) -> None:
    """Index the deadline of each child's wait in the leased parent's round ``iteration``."""
    if limit <= 0:
        return
    store, parent = lease.store, lease.record
    at = int((time.time() + limit) * 1000)
    members = {json.dumps({"parent": parent.id, "root": parent.root, "key": child_key(r, iteration),
                           "child": cid, "agent": r.agent, "id": r.delegation_id, "limit": limit}): at
               for r, cid in zip(requests, children, strict=True)}
    with redis_errors("journal"):
        async with store.client.pipeline(transaction=False) as pipe:
            pipe.zadd(store.keys.delegations_due(), members)
            pipe.expire(store.keys.delegations_due(), store.settings.retention)
            await pipe.execute()


async def expire_due(client: aioredis.Redis, keys: Keys, *, retention: int, requeue_after: float,
                     resume: Callable[[str], Awaitable[None]]) -> int:
    """Time out every child past its deadline (a reaper scan); returns how many were timed out."""
    with redis_errors("journal"):
        due = await client.zrangebyscore(keys.delegations_due(), "-inf", int(time.time() * 1000), start=0, num=100)
    script = registered(client).control.round_expire  # control_scripts.ROUND_EXPIRE
    index = DueIndex(client, keys, retention)
    n = 0
    for member in due:
        m = json.loads(member)
        entry = DelegateEntry(agent=m["agent"], error=timeout_text(float(m["limit"]), m["id"]))
        resume_at = int((time.time() + requeue_after) * 1000)
        with redis_errors("journal"):
            left, mode, waiting = await run_script(
                script,
                [keys.run(m["parent"]), keys.run_children(m["parent"]), keys.run(m["child"]),
                 keys.tree_deadlines(m["root"])],
                [m["key"], json.dumps(entry.to_json()), DELEGATION_CLOSED, retention, resume_at, m["parent"]],
                hint=(m["root"], resume_at), due=index,
            )
            await client.zrem(keys.delegations_due(), member)
        if int(left) >= 0:
            n += 1
            await stop_runs(client, keys, [], DELEGATION_CLOSED, flagged=[m["child"]])
        if int(left) >= 0 and int(waiting):
            await resume(m["child"])
        if int(left) == 0 and str(mode) == "worker":
            await resume(m["parent"])
    return n
