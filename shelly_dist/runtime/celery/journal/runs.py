"""Runs as journals in Redis: the record, the append-only message list, the children's results.

A run record (hash ``…:run:{id}``, parsed into :class:`~.record.RunRecord`) holds the run's
identity, status, state and, once ended, its result. Messages are appended to ``…:run:{id}:msgs``
as deltas, never rewritten. Every write goes through one of the scripts in :mod:`.scripts`, so
each is a single atomic round trip, and every write to a run is made through the
:class:`~.lease.Lease` a claim returned, fenced by its token.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import WatchError

from shelly_dist.agent import DelegateEntry
from shelly_dist.agent.children import child_run_id
from shelly_dist.chats import Message
from shelly_dist.errors import StoreError
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.refusal import write_through
from shelly_dist.runtime.celery.journal import blobs
from shelly_dist.runtime.celery.journal.lease import Lease
from shelly_dist.runtime.celery.journal.record import TERMINAL, RunRecord, RunStatus, child_key
from shelly_dist.runtime.celery.journal.store import RunStore
from shelly_dist.runtime.celery.journal.turn_batch import TurnBatch
from shelly_dist.runtime.celery.settings import RuntimeSettings

logger = logging.getLogger(__name__)

__all__ = ["TERMINAL", "Claim", "Journal", "child_key", "child_run_id"]

SESSION_RUNS_MAX = 10_000
"""Root runs a session's index keeps (the newest); older ones drop out of ``shelly runs`` and
``shelly cancel --session`` (their records still expire by retention)."""


RUN_SESSIONS_MAX = 100_000
"""Sessions the index of sessions with runs keeps (the newest): what ``shelly serve`` can list;
older ones drop out of its list (their runs still expire by retention)."""


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


@dataclass
class Claim:
    """The outcome of trying to start work on a run."""

    outcome: str
    """``ok``, ``busy``, ``terminal``, ``canceled``, ``missing``, ``exhausted`` or ``foreign``."""
    lease: Lease | None = None
    """Held for ``ok``, ``canceled`` and ``exhausted`` (the run is to be finished)."""
    detail: str = ""


class Journal:
    """Reads run records and hands out the leases that write them, for one Redis and key prefix."""

    def __init__(self, client: aioredis.Redis, settings: RuntimeSettings) -> None:
        self.store = RunStore(client, settings)
        """Redis as the scripts see it, shared with every :class:`~.lease.Lease` this journal hands out."""
        self.client = client
        self.settings = settings
        self.keys = self.store.keys
        self.clustered = self.store.clustered
        self.renewer = self.store.renewer
        """Keeps this process's leases from a thread of its own (started by the first lease held)."""
        self.due = self.store.due
        """The global due index the reapers scan (every deadline written is hinted there)."""
        self._sent_batch: TurnBatch[tuple[str, str], None] = TurnBatch(self._record_sent)

    # -- creation ---------------------------------------------------------------------------

    async def create_root(
        self, run_id: str, *, agent: str, session: str, mode: str, task: str, fingerprint: str,
        messages: list[Message] | None = None, owner: str = "", if_absent: bool = False, priority: str = "",
        share: str = "",
    ) -> bool:
        """A top-level run: ``mode`` is ``coordinator`` (in the CLI process, written only by
        ``owner``) or ``worker`` (its first user ``messages`` are stored for the worker that starts
        it; its deadline lets the reaper re-send it if its task never arrives).

        With ``if_absent`` nothing is written when a record ``run_id`` exists (or is created by
        someone else meanwhile): the id is an idempotency key. Returns whether this call created it.
        """
        now = time.time()
        messages, stashed = blobs.stash(messages or [])
        fields = RunRecord.new(
            run_id, agent=agent, root=run_id, session=session, mode=mode, task=task, fingerprint=fingerprint,
            status=RunStatus.QUEUED if mode == "worker" else RunStatus.RUNNING, owner=owner,
            # at its providers: the governor's class and fair share, inherited by the tree
            priority=priority, share=share,
            input=json.dumps([m.model_dump(mode="json") for m in messages]) if messages else "", now=now,
        ).fields()
        with redis_errors("journal"):
            # Redis full (or read-only) while a run starts: wait for room as every journal write
            # does, instead of failing the command (each attempt writes all or nothing, or what a
            # repeat writes again: the index entry is NX, the tree transaction watched).
            if stashed:  # the attachments' bytes before the input that references them
                await write_through(lambda: blobs.put(self.client, self.keys, stashed, self.settings.retention))
            return await write_through(lambda: self._write_root(run_id, session, fields, mode, now, if_absent))

    async def _write_root(self, run_id: str, session: str, fields: dict[str, str], mode: str, now: float,
                          if_absent: bool) -> bool:
        """One attempt of :meth:`create_root`'s writes."""
        due = _ms(now + self.settings.requeue_after) if mode == "worker" else None
        if not self.clustered:
            # One Redis: the index, the tree and its hint in one transaction (one round trip
            # instead of three; no reaper can see the hint without the record); with
            # ``if_absent`` watched first (three round trips instead of five: a batch makes
            # one of these per item, issue 27).
            def queue_all(pipe: Any) -> None:
                self._queue_index(pipe, run_id, session, now)
                self._queue_tree(pipe, run_id, fields, mode, now)
                if due is not None:
                    self.due.queue_hint(pipe, run_id, due)

            return await self._transaction(run_id, if_absent, queue_all)
        # The tree's keys in one transaction (one slot); the indexes of other slots around
        # it: the due hint before (a crash after the transaction still leaves the root where
        # the reapers look) and again after (a reaper that settled the hint meanwhile, seeing
        # no deadline yet, cannot hide the tree).
        async with self.client.pipeline(transaction=False) as pipe:
            self._queue_index(pipe, run_id, session, now)
            if due is not None:
                self.due.queue_hint(pipe, run_id, due)
            await pipe.execute()
        if not await self._transaction(run_id, if_absent,
                                       lambda pipe: self._queue_tree(pipe, run_id, fields, mode, now)):
            return False
        if due is not None:
            await self.due.hint(run_id, due)
        return True

    async def _transaction(self, run_id: str, if_absent: bool, queue: Callable[[Any], None]) -> bool:
        """Run ``queue``'s commands in one transaction; with ``if_absent``, none of them when the
        run's record exists or appears meanwhile (``WATCH``). Returns whether they ran."""
        async with self.client.pipeline(transaction=True) as pipe:
            if if_absent:
                await pipe.watch(self.keys.run(run_id))
                # HLEN, not EXISTS: a cluster pipeline splits EXISTS by slot and, while
                # watching, never runs it (redis-py 8.1); a record is a non-empty hash.
                if await pipe.hlen(self.keys.run(run_id)):
                    return False
                pipe.multi()
            queue(pipe)
            try:
                await pipe.execute()
            except WatchError:
                return False
        return True

    def _queue_tree(self, pipe: Any, run_id: str, fields: dict[str, str], mode: str, now: float) -> None:
        """Queue the root's record and its tree's keys (all in the tree's slot)."""
        key, retention = self.keys.run(run_id), self.settings.retention
        pipe.hset(key, mapping=fields)
        pipe.expire(key, retention)
        pipe.sadd(self.keys.tree_runs(run_id), run_id)
        pipe.expire(self.keys.tree_runs(run_id), retention)
        if mode == "worker":
            pipe.zadd(self.keys.tree_deadlines(run_id), {run_id: _ms(now + self.settings.requeue_after)})
            pipe.expire(self.keys.tree_deadlines(run_id), retention)

    def _queue_index(self, pipe: Any, run_id: str, session: str, now: float) -> None:
        """Queue a new root's entry in its session's index and its session's in the index of
        sessions (keys of other slots than the tree; an entry whose record never appears is
        dropped by its readers, as one whose record expired)."""
        retention = self.settings.retention
        index = self.keys.session_runs(session)
        pipe.zadd(index, {run_id: now}, nx=True)
        # Trimmed on every write: roots past retention (their records are gone) and the
        # oldest beyond SESSION_RUNS_MAX (a long-lived session must not grow without bound).
        pipe.zremrangebyscore(index, "-inf", now - retention)
        pipe.zremrangebyrank(index, 0, -SESSION_RUNS_MAX - 1)
        pipe.expire(index, retention)
        # The sessions' index (global key, alone in its slot), scored by their newest root.
        sessions = self.keys.run_sessions()
        pipe.zadd(sessions, {session: now})
        pipe.zremrangebyscore(sessions, "-inf", now - retention)
        pipe.zremrangebyrank(sessions, 0, -RUN_SESSIONS_MAX - 1)
        pipe.expire(sessions, retention)

    async def open_root(
        self, run_id: str, *, agent: str, session: str, task: str, fingerprint: str
    ) -> Lease:
        """Create a root run driven by this (coordinator) process and return its owner's lease."""
        token = f"owner:{uuid.uuid4().hex[:12]}"
        await self.create_root(run_id, agent=agent, session=session, mode="coordinator", task=task,
                               fingerprint=fingerprint, owner=token)
        # The record as just written (no read back: nobody else writes a coordinator's root).
        record = RunRecord.new(run_id, agent=agent, root=run_id, session=session, mode="coordinator",
                               status=RunStatus.RUNNING, task=task, fingerprint=fingerprint, owner=token)
        return Lease(self.store, record, token)

    # -- claiming -----------------------------------------------------------------------------

    async def claim(
        self, run_id: str, root: str, token: str, worker: str, *, session: str = "", agent: str = "",
        fingerprint: str = "",
    ) -> Claim:
        """Take the run's lease; with ``session`` and ``agent`` (the task's kwargs) a fresh run also
        gets its instance number (``instance_n``), once: inside the claim on a single Redis, right
        after it on a cluster (the session's counter is in another slot). With ``fingerprint``, a
        run of another config generation is left alone (``foreign``, its fingerprint as detail) and
        made due after ``requeue_after`` (in the same script), so a reaper re-sends it to any worker
        of the queue instead of waiting out its send's backstop (``scripts.SENT``)."""
        root = root or run_id
        keys = [self.keys.run(run_id), self.keys.run_lease(run_id), self.keys.run(root), self.keys.tree_deadlines(root),
                self.keys.run_received(run_id)]
        numbered = bool(session and agent) and not self.clustered  # the counter is another slot: not on a cluster
        if numbered:
            keys.append(self.keys.instance_counter(session, agent))
        now = time.time()
        requeue_at = _ms(now + self.settings.requeue_after)
        args = [token, self.settings.lease_ms, self.settings.max_attempts, worker, str(now),
                self.settings.retention, fingerprint, _ms(now), run_id, requeue_at]
        # the earliest deadline it may write: the lease's, or a foreign run's re-send (CLAIM)
        hint = (root, min(_ms(now) + self.settings.lease_ms, requeue_at))
        out = await self.store.run_script(self.store.scripts.claim, keys, args, hint=hint)
        outcome = str(out[0])
        if outcome in ("ok", "exhausted", "canceled"):
            if outcome == "ok":
                flat = out[1:]
                fields = dict(zip(flat[::2], flat[1::2], strict=True))
                if session and agent and not numbered and "state" not in fields and "instance_n" not in fields:
                    fields["instance_n"] = await self._number_instance(run_id, session, agent)
                record: RunRecord | None = RunRecord.parse({"id": run_id, **fields})
            else:
                record = await self.record(run_id)
            if record is None:
                return Claim("missing")
            detail = str(out[1]) if outcome == "exhausted" else ""
            return Claim(outcome, Lease(self.store, record, token, now + self.settings.lease), detail)
        return Claim(outcome, None, str(out[1]) if len(out) > 1 else "")

    async def _number_instance(self, run_id: str, session: str, agent: str) -> str:
        """The fresh run's instance number: drawn from the session's counter (another slot than
        the run, so not inside ``CLAIM``) and kept only if the run has none yet (``HSETNX``), so a
        redelivered fresh run keeps the number of its first claim; a crash in between skips one.
        Only on a cluster, where both steps share the loop turn's pipeline with the other claims of
        this process (:class:`.TurnPipeline`): one round trip per node for all of them."""
        n = await self.next_instance(session, agent)
        key = self.keys.run(run_id)

        def keep(pipe: Any) -> None:
            pipe.hsetnx(key, "instance_n", n)
            pipe.hget(key, "instance_n")

        with redis_errors("journal"):
            _, kept = await self.store.pipelined(keep)
        return str(kept or n)

    # -- the reaper's step ----------------------------------------------------------------------

    async def sent(self, root: str, run_id: str, took: bool) -> None:
        """After sending run ``run_id``'s task: the broker took it (``took``), so the reapers leave
        it to the broker until the backstop (``max(visibility_timeout, requeue_after)``, see
        ``scripts.SENT``) — a message queued behind a backlog is late, not lost, and only a task
        never sent (its sender died first) is re-sent after ``requeue_after``; or the broker
        refused it: it is due now (:meth:`due_now`)."""
        if not took:
            await self.due_now(root, run_id)
            return
        await self._sent_batch((root, run_id))

    async def _record_sent(self, runs: list[tuple[str, str]]) -> list[None]:
        """``SENT`` for the runs whose sends ended in one turn of the loop (a fan-out's children),
        in one pipeline (one round trip, one connection; on a cluster one per node the runs' trees
        are on) when there are several; a run the pipeline
        did not record (the script not yet loaded in this Redis, a write refused) is recorded on
        its own, as a single send is (``run_script``: loaded, a refusal waited out)."""
        backstop = _ms(time.time() + max(self.settings.visibility_timeout, self.settings.requeue_after))
        script, left = self.store.scripts.sent, runs
        if len(runs) > 1:
            try:
                with redis_errors("journal"):
                    async with self.client.pipeline(transaction=False) as pipe:
                        for root, run_id in runs:
                            # EVALSHA by name: a cluster pipeline blocks its ``evalsha`` method
                            # (redis-py 8.1), not the command, which it routes by its keys' slot
                            pipe.execute_command("EVALSHA", script.sha, 3, *self._sent_keys(root, run_id),
                                                 run_id, backstop)
                        results = await pipe.execute(raise_on_error=False)
            except StoreError as exc:
                logger.warning("runs %s: could not record their sends (%s); they may be re-sent after "
                               "requeue_after", ", ".join(r for _, r in runs), exc)
                return [None] * len(runs)
            left = [run for run, result in zip(runs, results, strict=True) if isinstance(result, Exception)]
        for root, run_id in left:
            try:
                await self.store.run_script(script, self._sent_keys(root, run_id), [run_id, backstop])
            except StoreError as exc:  # the run then waits for its old deadline: a harmless duplicate
                logger.warning("run %s: could not record its send (%s); it may be re-sent after requeue_after",
                               run_id, exc)
        return [None] * len(runs)

    def _sent_keys(self, root: str, run_id: str) -> list[str]:
        return [self.keys.tree_deadlines(root), self.keys.run_lease(run_id), self.keys.run(run_id)]

    async def due_now(self, root: str, run_id: str) -> None:
        """Make run ``run_id`` due now in its tree's deadline index, so a reaper scan (any
        worker's, within about ``reap_interval``) sends its task: the broker refused the send, or a
        worker died holding its message (``worker/orphans.py``). Only an
        indexed run's deadline is moved, and only earlier (``ZADD XX LT``): a run that finished
        meanwhile is not put back, and one claimed meanwhile is found ``alive`` by the reaper.
        Redis being away too is logged: the run then waits for its old deadline."""
        now = _ms(time.time())
        try:
            with redis_errors("journal"):
                await self.client.zadd(self.keys.tree_deadlines(root), {run_id: now}, xx=True, lt=True)
                await self.due.hint(root, now)
        except StoreError as exc:
            logger.warning("run %s: could not make it due for the reaper (%s); it is resent after its deadline",
                           run_id, exc)

    async def reap(self, root: str, run_id: str) -> list[str]:
        """Decide for one run past its deadline (see ``scripts.REAP``); returns the script's answer."""
        keys = [self.keys.tree_deadlines(root), self.keys.run(run_id), self.keys.run_lease(run_id),
                self.keys.run_received(run_id)]
        args = [run_id, _ms(time.time()), _ms(self.settings.requeue_after)]
        out = await self.store.run_script(self.store.scripts.reap, keys, args)
        return [str(x) for x in out]

    # -- reading -------------------------------------------------------------------------------

    async def record(self, run_id: str) -> RunRecord | None:
        """The run's record, or None when it does not exist (never created, or expired)."""
        with redis_errors("journal"):
            raw = await self.client.hgetall(self.keys.run(run_id))
        return RunRecord.parse({"id": run_id, **raw}) if raw else None

    async def fields(self, run_id: str) -> dict[str, str]:
        """Every field of the run's hash, for displays (``shelly runs``) and tests."""
        with redis_errors("journal"):
            return dict(await self.client.hgetall(self.keys.run(run_id)))

    async def messages(self, run_id: str, count: int) -> list[Message]:
        if count <= 0:
            return []
        with redis_errors("journal"):
            raw = await self.client.lrange(self.keys.run_msgs(run_id), 0, count - 1)
        return await blobs.fill(self.client, self.keys, [Message.model_validate_json(m) for m in raw])

    async def input_messages(self, record: RunRecord) -> list[Message]:
        """A root's first user messages as :meth:`create_root` stored them (attachments' bytes put
        back), or none."""
        raw = json.loads(record.input) if record.input else []
        return await blobs.fill(self.client, self.keys, [Message.model_validate(m) for m in raw])

    async def children(self, run_id: str, keys: list[str]) -> dict[str, DelegateEntry]:
        if not keys:
            return {}
        with redis_errors("journal"):
            raw = await self.client.hmget(self.keys.run_children(run_id), keys)
        return {k: DelegateEntry.model_validate_json(v) for k, v in zip(keys, raw, strict=True) if v}

    async def joined(self, run_id: str, root: str, keys: list[str]) -> tuple[dict[str, DelegateEntry], bool]:
        """The entries of ``keys`` joined into run ``run_id`` so far, and whether its tree (root
        ``root``) is canceled, in one round trip (a waiting coordinator's re-read)."""
        with redis_errors("journal"):
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.hmget(self.keys.run_children(run_id), keys)
                pipe.hget(self.keys.run(root), "canceled")
                raw, canceled = await pipe.execute()
        entries = {k: DelegateEntry.model_validate_json(v) for k, v in zip(keys, raw, strict=True) if v}
        return entries, canceled == "1"

    async def is_canceled(self, root: str) -> bool:
        with redis_errors("journal"):
            return await self.client.hget(self.keys.run(root), "canceled") == "1"

    async def next_instance(self, session: str, agent: str) -> int:
        """The next instance number of ``agent`` in ``session`` (its counter, kept for the
        retention); on a cluster in the loop turn's pipeline with the other runs' draws."""
        key = self.keys.instance_counter(session, agent)

        def draw(pipe: Any) -> None:
            pipe.incr(key)
            pipe.expire(key, self.settings.retention)

        with redis_errors("journal"):
            if self.clustered:
                n, _ = await self.store.pipelined(draw)
            else:
                async with self.client.pipeline(transaction=False) as pipe:
                    draw(pipe)
                    n, _ = await pipe.execute()
        return int(n)
