"""One Redis and key prefix as the run journal's scripts see it: below both the journal and the lease.

The journal (reads, claims, creation) and the lease (every fenced write of one run) both talk to
Redis through a :class:`RunStore`: the client, the key names, the settings, the pool's scripts
registered once per client (:mod:`.registry`), the global due index (:mod:`.due`), and
:meth:`RunStore.run_script`, which turns a fencing refusal into :class:`LeaseLost`, waits out a
Redis that refuses writes and hints the due index for a script that may write a deadline (the
module-level :func:`run_script` does the same for a caller holding only a client). Neither imports
the other to reach Redis, so the lease is the only writer of a run without being a part of the
journal cut off (STYLE lessons 11 and 14).
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from shelly_dist.errors import RunError
from shelly_dist.redisio.connection import is_cluster, redis_errors
from shelly_dist.redisio.keys import Keys
from shelly_dist.redisio.refusal import write_through
from shelly_dist.runtime.celery.journal import scripts
from shelly_dist.runtime.celery.journal.due import DueIndex
from shelly_dist.runtime.celery.journal.registry import registered
from shelly_dist.runtime.celery.journal.renewer import Renewer
from shelly_dist.runtime.celery.journal.stream import STREAM_MAXLEN
from shelly_dist.runtime.celery.journal.turn_batch import TurnPipeline, turn_pipeline
from shelly_dist.runtime.celery.settings import RuntimeSettings


class LeaseLost(RunError):
    """This process no longer holds the run: its writes were refused (``lease lost: <key>``)."""


class RunStore:
    """The runs of one Redis and key prefix: what the journal and its leases share."""

    def __init__(self, client: aioredis.Redis, settings: RuntimeSettings) -> None:
        self.client = client
        self.settings = settings
        self.keys = Keys(settings.key_prefix)
        self.clustered = is_cluster(client)
        """On a Redis Cluster the session's event stream (another slot than the tree) is written
        after a script, not inside it (see ``redisio/keys.py``)."""
        self.pipelined = turn_pipeline(client)
        """On a cluster, this process's writes outside the trees' slots of one loop turn, in one pipeline."""
        self.scripts = registered(client).journal
        self.control = registered(client).control
        """The control paths' scripts (stops, questions, interactive rounds, handoff): :mod:`.registry`."""
        self.due = DueIndex(client, self.keys, settings.retention)
        """The global due index the reapers scan: every deadline written is hinted there."""
        self.renewer = Renewer(settings, self.keys, clustered=self.clustered)
        """Keeps this process's leases from a thread of its own (started by the first lease held)."""

    async def run_script(
        self, script: Any, keys: list[str], args: list[Any], hint: tuple[str, int] | None = None
    ) -> Any:
        """Run one of the pool's scripts: :func:`run_script` with this store's due index; on a
        cluster in the loop turn's pipeline, with the other runs' scripts and hints of the turn
        (:class:`.TurnPipeline`: one round trip per node for this process's concurrent claims,
        checkpoints and finishes, not one each)."""
        return await run_script(script, keys, args, hint=hint, due=self.due,
                                pipelined=self.pipelined if self.clustered else None)

    def stream_keys(self, session: str) -> list[str]:
        """The session's event stream as the scripts' optional last key (none on a cluster)."""
        return [] if self.clustered else [self.keys.events(session)]

    async def append_events(self, session: str, events: str) -> None:
        """On a cluster, the step's events after its script succeeded (one batch entry, as the
        script would have written it). The appends of one loop turn (this process's concurrent
        runs finishing or checkpointing) share one pipeline (:class:`.TurnPipeline`); each run's
        own appends stay in the order it makes them, since each awaits its own."""
        if not events or not self.clustered:
            return
        stream = self.keys.events(session)

        def queue(pipe: Any) -> None:
            pipe.xadd(stream, {"events": events}, maxlen=STREAM_MAXLEN, approximate=True)
            pipe.expire(stream, self.settings.retention)

        with redis_errors("journal"):
            await self.pipelined(queue)


async def run_script(
    script: Any, keys: list[str], args: list[Any], *, hint: tuple[str, int] | None = None,
    due: DueIndex | None = None, origin: str = "journal", pipelined: TurnPipeline | None = None,
) -> Any:
    """Run one of the pool's scripts (registered once: :mod:`.registry`); a fencing refusal becomes
    :class:`LeaseLost`, other Redis errors ``StoreError`` naming ``origin``. While Redis refuses
    writes (full), the script is tried again with backoff
    (:func:`~shelly_dist.redisio.refusal.write_through`): every script is safe to repeat. A script
    that may write a deadline into a tree's index passes ``hint`` (the root, the earliest such
    deadline in ms) and the ``due`` index, which learns of it (:meth:`.DueIndex.run`). The one way
    every module of ``runtime/celery`` runs a script, whether it holds a :class:`RunStore` or only
    a client (a cancel from the CLI, a reaper's timeout). With ``pipelined`` (a cluster's store) the
    script goes in that loop turn's pipeline."""
    with redis_errors(origin):
        try:
            if hint is None:
                if pipelined is not None:
                    return await write_through(lambda: pipelined.script(script, keys, args))
                return await write_through(lambda: script(keys=keys, args=args))
            if due is None:
                raise ValueError(f"{origin}: a script hinting the due index needs it")
            root, at_ms = hint
            return await write_through(lambda: due.run(script, keys, args, root, at_ms))
        except ResponseError as exc:
            if str(exc).startswith(scripts.LEASE_LOST):
                raise LeaseLost(f"{origin}: {exc}") from exc
            raise
