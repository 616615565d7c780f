"""Steering on the pool: a run's inbox in Redis, and the live runs of a session to address.

``shelly steer`` appends a message to the run's inbox (``Keys.run_steer``) and counts it on the
run's record (``steer``) in one script (``control_scripts.STEER``: nothing for a run that has
ended). The run learns the count for free — with its claim and every checkpoint — so a run nobody
steers reads nothing more; one that is steered reads its inbox past its journaled cursor before its
next model call (:mod:`shelly_dist.agent.steering`), on whatever worker continues it. A run whose
final reply was held to ride with its finish knows the count of its previous checkpoint only: it
reads the count once more before finishing (``fresh``) when the worker heard a hint that its
inbox moved (``steer:<run>`` on the cancel channel, :class:`~.cancel.CancelWatch`), so a message
sent during its last model call starts another step instead of being dropped, and a run nobody
steers pays nothing at its end. The hint is only that: lost (a pub/sub blip in that moment), the
message is still in the inbox, counted, but the run has finished.

``--interrupt`` also ends the run's open approvals as skipped (the same answer path as ``shelly
reject``), so a run waiting for a person goes on at once with the message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from shelly_dist.agent import Run
from shelly_dist.agent.naming import instance_name
from shelly_dist.agent.steering import SteerMessage
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.children.cancel import STEER_HINT
from shelly_dist.runtime.celery.journal.record import LIVE
from shelly_dist.runtime.celery.journal.registry import registered
from shelly_dist.runtime.celery.journal.store import run_script
from shelly_dist.runtime.local.steering import LiveRun

__all__ = ["RedisInbox", "live_runs", "post"]



class RedisInbox:
    """The inbox of one run on the pool. ``known`` gives the record's ``steer`` count as last read
    (with the claim, a checkpoint), or ``None`` when this process has not read it lately."""

    def __init__(self, client: aioredis.Redis, keys: Keys, known: Callable[[], int | None]) -> None:
        self.client = client
        self.keys = keys
        self.known = known

    async def unread(self, run: Run, *, fresh: bool = False) -> list[Any]:
        run_id, cursor = run.state.run_id, run.state.steered
        count = None if fresh else self.known()
        with redis_errors("steer"):
            if count is None:
                count = int(await self.client.hget(self.keys.run(run_id), "steer") or 0)
            if count <= cursor:
                return []
            raw = await self.client.lrange(self.keys.run_steer(run_id), cursor, -1)
        return [SteerMessage.model_validate_json(r) for r in raw]


async def post(client: aioredis.Redis, keys: Keys, run_id: str, message: SteerMessage, *,
               retention: int) -> tuple[str, int]:
    """Append ``message`` to run ``run_id``'s inbox; (its status, or ``ended``/``missing``; how
    many messages its inbox holds)."""
    out = await run_script(registered(client).control.steer, [keys.run(run_id), keys.run_steer(run_id)],
                           [message.model_dump_json(), retention], origin="steer")
    status = str(out[0])
    if status not in ("ended", "missing"):  # the hint for a worker whose run may be in its last call
        with redis_errors("steer"):
            await client.publish(keys.cancel_channel(), f"{STEER_HINT}{run_id}")
    return status, int(out[1])


async def live_runs(client: aioredis.Redis, keys: Keys, session: str) -> list[LiveRun]:
    """The runs of ``session`` that have not ended, every tree, roots first: what a steering
    message may be addressed to (O(runs of the session))."""
    fields = ["agent", "task", "instance_n", "instance", "status", "depth"]
    with redis_errors("steer"):
        roots = await client.zrange(keys.session_runs(session), 0, -1)
        async with client.pipeline(transaction=False) as pipe:
            for root in roots:
                pipe.smembers(keys.tree_runs(root))
            trees = await pipe.execute()
        ids = [rid for root, tree in zip(roots, trees, strict=True) for rid in sorted(tree or {root})]
        async with client.pipeline(transaction=False) as pipe:
            for rid in ids:
                pipe.hmget(keys.run(rid), fields)
            rows = await pipe.execute()
    out = []
    for rid, row in zip(ids, rows, strict=True):
        agent, task, n, instance, status, depth = row
        if status not in LIVE:
            continue
        name = instance or (instance_name(agent, task or "", int(n)) if n and int(depth or 0) > 0 else agent)
        out.append(LiveRun(rid, name, agent or "", int(depth or 0)))
    return sorted(out, key=lambda r: r.depth)
