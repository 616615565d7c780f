"""One Redis and key prefix as the run journal's scripts see it: below both the journal and the lease.

The journal (reads, claims, creation) and the lease (every fenced write of one run) both talk to
Redis through a :class:`RunStore`: the client, the key names, the settings, the journal's scripts
registered once per client (:mod:`.scripts`), the global due index (:mod:`.due`), and
:meth:`RunStore.run_script`, which turns a fencing refusal into :class:`LeaseLost` and hints the
due index for a script that may write a deadline. Neither imports the other to reach Redis, so the lease is
the only writer of a run without being a part of the journal cut off (STYLE lessons 11 and 14).
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from shelly_dist.errors import RunError
from shelly_dist.runtime.celery import scripts
from shelly_dist.runtime.celery.due import DueIndex
from shelly_dist.runtime.celery.events import STREAM_MAXLEN
from shelly_dist.runtime.celery.renewer import Renewer
from shelly_dist.runtime.celery.settings import RuntimeSettings
from shelly_dist.state.connection import is_cluster, redis_errors
from shelly_dist.state.keys import Keys
from shelly_dist.state.refusal import write_through


class LeaseLost(RunError):
    """This process no longer holds the run: its writes were refused (``lease lost: <key>``)."""


class JournalScripts:
    """The journal's scripts, registered once per client (``EVALSHA`` after the first call)."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.expect = client.register_script(scripts.EXPECT)
        self.checkpoint = client.register_script(scripts.CHECKPOINT)
        self.claim = client.register_script(scripts.CLAIM)
        self.renew = client.register_script(scripts.RENEW)
        self.release = client.register_script(scripts.RELEASE)
        self.drop = client.register_script(scripts.DROP)
        self.finish = client.register_script(scripts.FINISH)
        self.reap = client.register_script(scripts.REAP)
        self.sent = client.register_script(scripts.SENT)
        self.spawn_start = client.register_script(scripts.SPAWN_START)
        self.spawn_announce = client.register_script(scripts.SPAWN_ANNOUNCE)
        self.spawn_suspend = client.register_script(scripts.SPAWN_SUSPEND)


class RunStore:
    """The runs of one Redis and key prefix: what the journal and its leases share."""

    def __init__(self, client: aioredis.Redis, settings: RuntimeSettings) -> None:
        self.client = client
        self.settings = settings
        self.keys = Keys(settings.key_prefix)
        self.clustered = is_cluster(client)
        """On a Redis Cluster the session's event stream (another slot than the tree) is written
        after a script, not inside it (see ``state/keys.py``)."""
        self.scripts = JournalScripts(client)
        self.due = DueIndex(client, self.keys, settings.retention)
        """The global due index the reapers scan: every deadline written is hinted there."""
        self.renewer = Renewer(settings, self.keys, clustered=self.clustered)
        """Keeps this process's leases from a thread of its own (started by the first lease held)."""

    async def run_script(
        self, script: Any, keys: list[str], args: list[Any], hint: tuple[str, int] | None = None
    ) -> Any:
        """Run a journal script; a fencing refusal becomes :class:`LeaseLost`, other Redis errors
        ``StoreError``. While Redis refuses writes (full), the script is tried again with backoff
        (:func:`~shelly_dist.state.refusal.write_through`): every script is safe to repeat. A
        script that may write a deadline into a tree's index passes ``hint`` (the root, the
        earliest such deadline in ms), so the due index learns of it (:meth:`.DueIndex.run`)."""
        with redis_errors("journal"):
            try:
                if hint is None:
                    return await write_through(lambda: script(keys=keys, args=args))
                root, at_ms = hint
                return await write_through(lambda: self.due.run(script, keys, args, root, at_ms))
            except ResponseError as exc:
                if str(exc).startswith(scripts.LEASE_LOST):
                    raise LeaseLost(f"journal: {exc}") from exc
                raise

    def stream_keys(self, session: str) -> list[str]:
        """The session's event stream as the scripts' optional last key (none on a cluster)."""
        return [] if self.clustered else [self.keys.events(session)]

    async def append_events(self, session: str, events: str) -> None:
        """On a cluster, the step's events after its script succeeded (one batch entry, as the
        script would have written it)."""
        if not events or not self.clustered:
            return
        stream = self.keys.events(session)
        with redis_errors("journal"):
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.xadd(stream, {"events": events}, maxlen=STREAM_MAXLEN, approximate=True)
                pipe.expire(stream, self.settings.retention)
                await pipe.execute()
