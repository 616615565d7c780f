"""Stopping a subtree on the pool: one mechanism, whichever stopper calls it.

Embedded, a stop is an asyncio cancel of the child's task carrying its reason (the delegator's
``_stopped`` ends the run ``canceled`` with it). On the pool no task may be running the run to
cancel, so the stop is a *flag* in the run's record and a *wake-up*:

* the flag — ``stop = <reason>`` on each run of the subtree (:func:`stop_runs`, one script per
  level: ``control_scripts.STOP``) — is read with the claim and with every checkpoint and checked
  before every model call, so the run ends ``canceled`` with the reason as its entry's error at
  its next step, on any worker, however late; a run already flagged or ended is skipped with its
  subtree (whoever flagged it flagged that too);
* the wake-up — each run id on the cancel channel (:func:`wake`) — makes every process's
  :class:`~.cancel.CancelWatch` cancel the in-flight step of that run at once (its model call
  aborted), which then ends the same way.

Every stopper of a subtree calls :func:`stop_runs`: ``delegate_fail_fast`` (a failed child's
siblings, :meth:`.policy.PoolPolicy.stop_siblings`), a spawned run cancelled by ``spawn_cancel`` or
with its parent (:mod:`.spawns`), and an interactive child stopped by its delegation — its
``question_timeout`` (:mod:`.round_timeout`) or its parent's end (:func:`.interactive.close`),
whose own flag the join script sets atomically with its entry (``flagged``). Cancelling a whole
tree (:func:`.cancel.cancel_tree`: ``shelly cancel``, Ctrl-C, ``Session.cancel``) is the same
mechanism at the tree's scope: one flag on the root (``canceled``, read with the same claim and
checkpoint) for every run of the tree, the runs no task advances marked ``canceled`` at once, and
the root's id on the same channel (a watch tracks each in-flight step under its run id and its
root). Limits stop no subtree: each run's own next model call is refused by the shared scope.
"""

from __future__ import annotations

from collections.abc import Iterable

import redis.asyncio as aioredis

from shelly_dist.agent.children import run_id_of
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.journal.registry import registered
from shelly_dist.runtime.celery.journal.store import run_script


async def stop_runs(client: aioredis.Redis, keys: Keys, ids: list[str], reason: str, *,
                    flagged: Iterable[str] = ()) -> list[str]:
    """Flag ``ids`` and their unfinished descendants stopped with ``reason``, then wake the workers
    running them; returns the run ids flagged here. ``flagged`` are runs their caller has flagged
    itself (in the script that decided the stop): they are woken and their subtrees stopped."""
    flagged = list(flagged)
    stopped: list[str] = []
    script = registered(client).control.stop  # control_scripts.STOP
    with redis_errors("stop"):
        ids = ids + await children_of(client, keys, flagged)
        while ids:
            hit = await run_script(script, [keys.run(i) for i in ids], [reason], origin="stop")
            level = [ids[int(i) - 1] for i in hit]
            stopped += level
            ids = await children_of(client, keys, level)
    await wake(client, keys, flagged + stopped)
    return stopped


async def wake(client: aioredis.Redis, keys: Keys, ids: list[str]) -> None:
    """Announce ``ids`` (run ids, or a tree's root) on the cancel channel: each process's
    :class:`~.cancel.CancelWatch` cancels its in-flight steps of them. One by one: a cluster
    client pipelines keyed commands only."""
    with redis_errors("stop"):
        for rid in ids:
            await client.publish(keys.cancel_channel(), rid)


async def children_of(client: aioredis.Redis, keys: Keys, parents: list[str]) -> list[str]:
    """The run ids of every child each of ``parents`` has dispatched."""
    if not parents:
        return []
    async with client.pipeline(transaction=False) as pipe:
        for rid in parents:
            pipe.smembers(keys.run_expected(rid))
        below = await pipe.execute()
    return [run_id_of(rid, m) for rid, members in zip(parents, below, strict=True) for m in sorted(members)]
