"""The global due index: which run trees may have something due, so reaping costs what is due.

Each tree keeps the truth in its own indexes (``…:run:{root}:deadlines``, ``…:questions:due``).
Beside them, the due index holds one entry per tree that may need a reaper: the root's id, scored
by a time (ms) at or before the tree's earliest deadline — a *hint*, never later than the truth.
It is sharded over :data:`SHARDS` hash tags (``…:due:{d0}`` …), so on a Redis Cluster it spreads
over nodes, and each shard is scanned with ``ZRANGEBYSCORE … LIMIT`` by the one worker elected for
it (:meth:`DueIndex.elect`, a lease in ``…:due:scanners``). An idle pool therefore costs a few
commands per scan whatever the number of live trees (DESIGN §3 rule 17).

Writers: every script that puts a deadline into a tree's index is run through :meth:`DueIndex.run`
with the earliest time it may write, which hints the tree *before* the script (a writer that dies
right after its script still left a hint: an early hint only costs a wasted check) and *after* it
(a scanner that read the tree before the script and raised the hint meanwhile is corrected). On a
single Redis the hint goes inside the script (one atomic step, one round trip), and a script that
writes a deadline only on some paths hints only there (``scripts.FINISH``: the join that makes its
parent's resume due; ``control_scripts.hinted_text``); on a cluster (other slots) before and after
it. A hint only ever lowers a tree's score (``ZADD LT``) and bumps the tree's version.

Scanner: for a tree past its hint, the reaper reads the tree's truth, handles what is due, then
:meth:`DueIndex.settle` sets the hint to the tree's new earliest deadline (or drops the tree) —
only if its version is still the one read before the truth; otherwise a writer hinted meanwhile
and the hint may only be lowered. Moving a deadline later (a lease renewed) needs no hint: the
tree is checked at the old time and its hint raised then, so a run held for a long step costs a
check per lease period.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis

from shelly_dist.redisio.connection import is_cluster, redis_errors
from shelly_dist.redisio.keys import Keys, tree_tag
from shelly_dist.redisio.refusal import write_through
from shelly_dist.runtime.celery.journal.registry import registered
from shelly_dist.runtime.celery.journal.turn_batch import turn_pipeline

SHARDS = 16
"""Shards of the due index. Fixed: a tree's shard is derived from its id, so changing this
orphans the hints already written (their trees are then found only when hinted again)."""

def shard_of(root: str) -> int:
    """The tree's shard: a stable hash of its tree tag (the same in every process)."""
    return zlib.crc32(tree_tag(root).encode()) % SHARDS


def queue_hint(pipe: Any, keys: Keys, retention: int, root: str, at_ms: int) -> None:
    """Queue the hint that tree ``root`` may have something due at ``at_ms`` into ``pipe`` (a
    pipeline or transaction, asynchronous or not: the renewer's thread hints with its own client)."""
    shard = shard_of(root)
    index, versions = keys.due_shard(shard), keys.due_versions(shard)
    pipe.zadd(index, {root: at_ms}, lt=True)
    pipe.hincrby(versions, root, 1)
    pipe.expire(index, retention)
    pipe.expire(versions, retention)


class DueIndex:
    """The hints for one Redis and key prefix (writers' side and scanners' side)."""

    def __init__(self, client: aioredis.Redis, keys: Keys, retention: int) -> None:
        self.client = client
        self.keys = keys
        self.retention = retention
        self.clustered = is_cluster(client)
        self._pipelined = turn_pipeline(client)
        control = registered(client).control  # ELECT, SETTLE, RESIGN: .control_scripts
        self._elect = control.elect
        self._settle = control.settle
        self._resign = control.resign

    # -- writers -----------------------------------------------------------------------------

    def queue_hint(self, pipe: Any, root: str, at_ms: int) -> None:
        """Queue the hint that tree ``root`` may have something due at ``at_ms`` (in a pipeline
        or transaction of the caller's)."""
        queue_hint(pipe, self.keys, self.retention, root, at_ms)

    async def hint(self, root: str, at_ms: int) -> None:
        """Hint tree ``root`` at ``at_ms`` now (returns once the hint is written). On a cluster the
        hints of one loop turn (the concurrent runs of this process, before or after their scripts)
        go in one pipeline (:class:`.TurnPipeline`): one round trip per due shard's node, not one
        per hint; each is still its own ``ZADD LT`` and version bump."""
        with redis_errors("due index"):
            if self.clustered:
                await self._pipelined(lambda pipe: self.queue_hint(pipe, root, at_ms))
                return
            async with self.client.pipeline(transaction=False) as pipe:
                self.queue_hint(pipe, root, at_ms)
                await pipe.execute()

    async def run(self, script: Any, keys: Sequence[str], args: Sequence[Any], root: str, at_ms: int) -> Any:
        """Run a script that may write a deadline no earlier than ``at_ms`` into tree ``root``,
        hinted (see the module docstring): inside the script on a single Redis, one command; before
        and after it on a cluster, where the hints and the script each share the loop turn's
        pipeline with the other runs' (:class:`.TurnPipeline`). Redis errors are raised as they
        come (``ResponseError`` for the script's own refusals), like calling the script directly —
        except, on a cluster, once the script ran: its hint after is then tried again alone while
        Redis refuses writes
        (:func:`~shelly_dist.redisio.refusal.write_through`), so a refused hint never makes a caller
        that retries refused writes (:meth:`.RunStore.run_script`) repeat a script that wrote. On a
        single Redis a refused write refuses the script's first write (the hint's, or a lazily
        hinting script's own), so nothing is written and the whole script is safe to repeat."""
        if self.clustered:
            await self.hint(root, at_ms)
            out = await self._pipelined.script(script, keys, args)
            await write_through(lambda: self.hint(root, at_ms))
            return out
        hinted = registered(self.client).hinted(script)
        shard = shard_of(root)
        return await hinted(keys=[*keys, self.keys.due_shard(shard), self.keys.due_versions(shard)],
                            args=[*args, root, at_ms, self.retention])

    # -- scanners ----------------------------------------------------------------------------

    async def elect(self, me: str, now_ms: int, ttl_ms: int) -> list[int]:
        """The shards this scanner holds for the next ``ttl_ms`` (taking the free or lapsed ones)."""
        with redis_errors("due index"):
            held = await self._elect(keys=[self.keys.due_scanners()], args=[me, now_ms, ttl_ms, SHARDS])
        return [int(s) for s in held]

    async def resign(self, me: str) -> None:
        """Free the shards this scanner holds, for the next worker that elects."""
        with redis_errors("due index"):
            await self._resign(keys=[self.keys.due_scanners()], args=[me])

    async def due(self, shards: Sequence[int], now_ms: int, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` trees per shard of ``shards`` whose hint has passed, each with its
        version (read after the hint: a writer that hinted before it wrote its deadline before it
        too). One round trip when nothing is due, two otherwise."""
        if not shards:
            return []
        with redis_errors("due index"):
            async with self.client.pipeline(transaction=False) as pipe:
                for shard in shards:
                    pipe.zrangebyscore(self.keys.due_shard(shard), "-inf", now_ms, start=0, num=limit)
                found = dict(zip(shards, await pipe.execute(), strict=True))
            found = {shard: roots for shard, roots in found.items() if roots}
            if not found:
                return []
            async with self.client.pipeline(transaction=False) as pipe:
                for shard, roots in found.items():
                    pipe.hmget(self.keys.due_versions(shard), roots)
                versions = await pipe.execute()
        return [(root, v or "0") for roots, seen in zip(found.values(), versions, strict=True)
                for root, v in zip(roots, seen, strict=True)]

    async def settle(self, root: str, seen: str, earliest_ms: int | None) -> None:
        """After checking tree ``root`` (version ``seen``): its hint becomes its earliest deadline,
        or it leaves the index when it has none."""
        shard = shard_of(root)
        with redis_errors("due index"):
            await self._settle(keys=[self.keys.due_shard(shard), self.keys.due_versions(shard)],
                               args=[root, seen, "" if earliest_ms is None else earliest_ms])
