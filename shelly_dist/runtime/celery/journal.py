"""Runs as journals in Redis: the record, the append-only message list, the children's results.

A run record (hash ``…:run:{id}``, parsed into :class:`~.record.RunRecord`) holds the run's
identity, status, state and, once ended, its result. Messages are appended to ``…:run:{id}:msgs``
as deltas, never rewritten. Every write goes through one of the scripts in :mod:`.scripts`, so
each is a single atomic round trip, and every write to a run is made through the
:class:`~.lease.Lease` a claim returned, fenced by its token.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError, WatchError

from shelly_dist.agent import ChildRequest, DelegateEntry, RunState
from shelly_dist.chats import Message
from shelly_dist.errors import StoreError
from shelly_dist.runtime.celery import scripts
from shelly_dist.runtime.celery.due import DueIndex
from shelly_dist.runtime.celery.events import STREAM_MAXLEN
from shelly_dist.runtime.celery.lease import Held, Lease, LeaseLost
from shelly_dist.runtime.celery.record import TERMINAL, RunRecord
from shelly_dist.runtime.celery.renewer import Renewer, renew_request
from shelly_dist.runtime.celery.settings import RuntimeSettings
from shelly_dist.state.connection import is_cluster, redis_errors
from shelly_dist.state.keys import Keys

logger = logging.getLogger(__name__)

__all__ = ["TERMINAL", "Claim", "Journal", "child_key", "child_run_id"]

SESSION_RUNS_MAX = 10_000
"""Root runs a session's index keeps (the newest); older ones drop out of ``shelly runs`` and
``shelly cancel --session`` (their records still expire by retention)."""


def child_run_id(parent_id: str, request: ChildRequest, iteration: int) -> str:
    """Deterministic, so a redelivered parent step names the same children again; it starts with
    the parent's id, hence with the root's (a hash tag on the root covers the whole tree)."""
    digest = hashlib.sha1(f"{iteration}:{request.key}".encode()).hexdigest()[:8]
    return f"{parent_id}-{digest}"


def child_key(request: ChildRequest, iteration: int) -> str:
    """The field under which the child's entry joins the parent (unique per suspension)."""
    return f"{iteration}:{request.key}"


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
        self.client = client
        self.settings = settings
        self.keys = Keys(settings.key_prefix)
        self.clustered = is_cluster(client)
        """On a Redis Cluster the session's event stream (another slot than the tree) is written
        after a script, not inside it (see ``state/keys.py``)."""
        self._expect = client.register_script(scripts.EXPECT)
        self._checkpoint = client.register_script(scripts.CHECKPOINT)
        self._claim = client.register_script(scripts.CLAIM)
        self._renew_script = client.register_script(scripts.RENEW)
        self._release = client.register_script(scripts.RELEASE)
        self._drop = client.register_script(scripts.DROP)
        self._finish = client.register_script(scripts.FINISH)
        self._reap = client.register_script(scripts.REAP)
        self._sent = client.register_script(scripts.SENT)
        self.due = DueIndex(client, self.keys, settings.retention)
        """The global due index the reapers scan: every deadline written is hinted there."""
        self.renewer = Renewer(settings, self.keys, clustered=self.clustered)
        """Keeps this process's leases from a thread of its own (started by the first lease held)."""

    async def _run_script(
        self, script: Any, keys: list[str], args: list[Any], hint: tuple[str, int] | None = None
    ) -> Any:
        """Run a journal script; a fencing refusal becomes :class:`LeaseLost`, other Redis errors
        ``StoreError``. A script that may write a deadline into a tree's index passes ``hint``
        (the root, the earliest such deadline in ms), so the due index learns of it."""
        with redis_errors("journal"):
            try:
                if hint is not None:
                    return await self.due.run(script, keys, args, *hint)
                return await script(keys=keys, args=args)
            except ResponseError as exc:
                if str(exc).startswith(scripts.LEASE_LOST):
                    raise LeaseLost(f"journal: {exc}") from exc
                raise

    # -- creation ---------------------------------------------------------------------------

    async def create_root(
        self, run_id: str, *, agent: str, session: str, mode: str, task: str, fingerprint: str,
        messages: list[Message] | None = None, owner: str = "", if_absent: bool = False,
    ) -> bool:
        """A top-level run: ``mode`` is ``coordinator`` (in the CLI process, written only by
        ``owner``) or ``worker`` (its first user ``messages`` are stored for the worker that starts
        it; its deadline lets the reaper re-send it if its task never arrives).

        With ``if_absent`` nothing is written when a record ``run_id`` exists (or is created by
        someone else meanwhile): the id is an idempotency key. Returns whether this call created it.
        """
        now = time.time()
        fields = {
            "id": run_id, "agent": agent, "depth": "0", "parent": "", "parent_key": "", "root": run_id,
            "session": session, "mode": mode, "status": "queued" if mode == "worker" else "running",
            "task": task[:2000], "fingerprint": fingerprint, "created": str(now), "updated": str(now),
            "pending": "0", "attempts": "0", "msg_count": "0",
        }
        if owner:
            fields["owner"] = owner
        if messages:
            fields["input"] = json.dumps([m.model_dump(mode="json") for m in messages])
        key = self.keys.run(run_id)
        with redis_errors("journal"):
            due = _ms(now + self.settings.requeue_after) if mode == "worker" else None
            if not if_absent and not self.clustered:
                # One Redis: the index, the tree and its hint in one transaction (one round trip
                # instead of three; no reaper can see the hint without the record).
                async with self.client.pipeline(transaction=True) as pipe:
                    self._queue_index(pipe, run_id, session, now)
                    self._queue_tree(pipe, run_id, fields, mode, now)
                    if due is not None:
                        self.due.queue_hint(pipe, run_id, due)
                    await pipe.execute()
                return True
            # The tree's keys in one transaction (one slot); the indexes of other slots around
            # it: the due hint before (a crash after the transaction still leaves the root where
            # the reapers look) and again after (a reaper that settled the hint meanwhile, seeing
            # no deadline yet, cannot hide the tree).
            async with self.client.pipeline(transaction=False) as pipe:
                self._queue_index(pipe, run_id, session, now)
                if due is not None:
                    self.due.queue_hint(pipe, run_id, due)
                await pipe.execute()
            async with self.client.pipeline(transaction=True) as pipe:
                if if_absent:
                    await pipe.watch(key)
                    # HLEN, not EXISTS: a cluster pipeline splits EXISTS by slot and, while
                    # watching, never runs it (redis-py 8.1); a record is a non-empty hash.
                    if await pipe.hlen(key):
                        return False
                    pipe.multi()
                self._queue_tree(pipe, run_id, fields, mode, now)
                try:
                    await pipe.execute()
                except WatchError:
                    return False
        if due is not None:
            await self.due.hint(run_id, due)
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
        """Queue a new root's entry in its session's index (a key of another slot than the tree;
        an entry whose record never appears is dropped by its readers, as one whose record
        expired)."""
        retention = self.settings.retention
        index = self.keys.session_runs(session)
        pipe.zadd(index, {run_id: now}, nx=True)
        # Trimmed on every write: roots past retention (their records are gone) and the
        # oldest beyond SESSION_RUNS_MAX (a long-lived session must not grow without bound).
        pipe.zremrangebyscore(index, "-inf", now - retention)
        pipe.zremrangebyrank(index, 0, -SESSION_RUNS_MAX - 1)
        pipe.expire(index, retention)

    async def open_root(
        self, run_id: str, *, agent: str, session: str, task: str, fingerprint: str
    ) -> Lease:
        """Create a root run driven by this (coordinator) process and return its owner's lease."""
        token = f"owner:{uuid.uuid4().hex[:12]}"
        await self.create_root(run_id, agent=agent, session=session, mode="coordinator", task=task,
                               fingerprint=fingerprint, owner=token)
        # The record as just written (no read back: nobody else writes a coordinator's root).
        record = RunRecord(id=run_id, agent=agent, root=run_id, session=session, mode="coordinator",
                           status="running", task=task[:2000], fingerprint=fingerprint)
        return Lease(self, record, token)

    # -- claiming -----------------------------------------------------------------------------

    async def claim(
        self, run_id: str, root: str, token: str, worker: str, *, session: str = "", agent: str = "",
        fingerprint: str = "",
    ) -> Claim:
        """Take the run's lease; with ``session`` and ``agent`` (the task's kwargs) a fresh run also
        gets its instance number (``instance_n``), once: inside the claim on a single Redis, right
        after it on a cluster (the session's counter is in another slot). With ``fingerprint``, a
        run of another config generation is left alone (``foreign``, its fingerprint as detail)."""
        root = root or run_id
        keys = [self.keys.run(run_id), self.keys.run_lease(run_id), self.keys.run(root), self.keys.tree_deadlines(root)]
        numbered = bool(session and agent) and not self.clustered  # the counter is another slot: not on a cluster
        if numbered:
            keys.append(self.keys.instance_counter(session, agent))
        now = time.time()
        args = [token, self.settings.lease_ms, self.settings.max_attempts, worker, str(now),
                self.settings.retention, fingerprint, _ms(now), run_id]
        out = await self._run_script(self._claim, keys, args, hint=(root, _ms(now) + self.settings.lease_ms))
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
            return Claim(outcome, Lease(self, record, token, now + self.settings.lease), detail)
        return Claim(outcome, None, str(out[1]) if len(out) > 1 else "")

    async def _number_instance(self, run_id: str, session: str, agent: str) -> str:
        """The fresh run's instance number: drawn from the session's counter (another slot than
        the run, so not inside ``CLAIM``) and kept only if the run has none yet (``HSETNX``), so a
        redelivered fresh run keeps the number of its first claim; a crash in between skips one."""
        n = await self.next_instance(session, agent)
        key = self.keys.run(run_id)
        with redis_errors("journal"):
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.hsetnx(key, "instance_n", n)
                pipe.hget(key, "instance_n")
                _, kept = await pipe.execute()
        return str(kept or n)

    async def _append_events(self, session: str, events: str) -> None:
        """On a cluster, the step's events after its script succeeded (one batch entry, as the
        script would have written it)."""
        if not events:
            return
        stream = self.keys.events(session)
        with redis_errors("journal"):
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.xadd(stream, {"events": events}, maxlen=STREAM_MAXLEN, approximate=True)
                pipe.expire(stream, self.settings.retention)
                await pipe.execute()

    def _stream(self, session: str) -> list[str]:
        """The session's event stream as the scripts' optional last key (none on a cluster)."""
        return [] if self.clustered else [self.keys.events(session)]

    # -- the lease's writes (call them through :class:`Lease`) -----------------------------------

    async def _renew(self, lease: Lease) -> bool:
        keys, args = renew_request(self.keys, self.settings, [lease], time.time())
        kept = await self._run_script(self._renew_script, keys, args)
        return bool(int(kept[0]))

    async def _expect_children(
        self, lease: Lease, requests: list[ChildRequest], iteration: int, fingerprint: str
    ) -> tuple[list[str], list[str]]:
        parent = lease.record
        now = time.time()
        argv: list[Any] = [lease.token, self.settings.retention, len(requests), _ms(now + self.settings.requeue_after)]
        ids: list[str] = []
        for r in requests:
            cid = child_run_id(parent.id, r, iteration)
            ids.append(cid)
            fields = {
                "id": cid, "agent": r.agent, "depth": str(r.depth), "parent": parent.id,
                "parent_key": child_key(r, iteration), "root": parent.root, "session": parent.session,
                "mode": "worker", "status": "queued", "request": r.model_dump_json(),
                "fingerprint": fingerprint, "created": str(now), "updated": str(now), "pending": "0",
                "attempts": "0", "msg_count": "0", "task": r.task[:2000],
            }
            argv += [child_key(r, iteration), cid, json.dumps(fields)]
        keys = [self.keys.run(parent.id), self.keys.run_lease(parent.id), self.keys.run_expected(parent.id),
                self.keys.tree_runs(parent.root), self.keys.tree_deadlines(parent.root)]
        keys += [self.keys.run(cid) for cid in ids]
        to_start = await self._run_script(self._expect, keys, argv, hint=(parent.root, argv[3]))
        return ids, list(to_start)

    async def _checkpoint_run(
        self, lease: Lease, offset: int, state: RunState, new: list[Message], status: str, events: str,
        rewrite: bool = False,
    ) -> tuple[int, bool]:
        return await self._write_checkpoint(lease, Held.of(offset, state, new), status, events, rewrite)

    async def _write_held(self, lease: Lease, held: Held, events: str) -> None:
        await self._write_checkpoint(lease, held, "running", events)

    async def _write_checkpoint(
        self, lease: Lease, held: Held, status: str, events: str, rewrite: bool = False
    ) -> tuple[int, bool]:
        r = lease.record
        args: list[Any] = [lease.token, held.offset, held.state, status,
                           self.settings.retention, str(time.time()), events, "1" if rewrite else "0"]
        args += held.messages
        keys = [self.keys.run(r.id), self.keys.run_msgs(r.id), self.keys.run(r.root), self.keys.run_lease(r.id),
                *self._stream(r.session)]
        count, canceled, r.stop = await self._run_script(self._checkpoint, keys, args)
        if self.clustered:
            await self._append_events(r.session, events)
        return int(count), canceled == "1"

    async def _release_run(self, lease: Lease) -> int:
        r = lease.record
        keys = [self.keys.run(r.id), self.keys.run_lease(r.id), self.keys.tree_deadlines(r.root)]
        return int(await self._run_script(self._release, keys, [lease.token, r.id]))

    async def _drop_lease(self, lease: Lease) -> None:
        await self._run_script(self._drop, [self.keys.run_lease(lease.run_id)], [lease.token])

    async def _finish_run(
        self, lease: Lease, status: str, result: dict[str, Any], events: str, fields: dict[str, str]
    ) -> tuple[int, str]:
        r = lease.record
        parent = r.parent or r.id
        keys = [self.keys.run(r.id), self.keys.run_lease(r.id), self.keys.run(parent), self.keys.run_children(parent),
                self.keys.tree_deadlines(r.root), self.keys.run_msgs(r.id), *self._stream(r.session)]
        now = time.time()
        held, lease.held = lease.held, None
        args: list[Any] = [lease.token, status, json.dumps(result), str(now), self.settings.retention,
                           r.parent_key if r.parent else "", events, r.id, r.parent,
                           _ms(now + self.settings.requeue_after)]
        if held is None:
            args += ["", "", 0]
        else:
            args += [held.offset, held.state, len(held.messages), *held.messages]
        for k, v in fields.items():
            args += [k, v]
        # A child's finish may complete its parent's join, making the parent's resume due.
        hint = (r.root, args[9]) if r.parent else None
        left, mode = await self._run_script(self._finish, keys, args, hint=hint)
        if mode == "terminal":
            return -1, ""
        if self.clustered:
            await self._append_events(r.session, events)
        return int(left), str(mode)

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
        backstop = _ms(time.time() + max(self.settings.visibility_timeout, self.settings.requeue_after))
        keys = [self.keys.tree_deadlines(root), self.keys.run_lease(run_id), self.keys.run(run_id)]
        try:
            await self._run_script(self._sent, keys, [run_id, backstop])
        except StoreError as exc:  # the run then waits for its old deadline: a harmless duplicate
            logger.warning("run %s: could not record its send (%s); it may be re-sent after requeue_after",
                           run_id, exc)

    async def due_now(self, root: str, run_id: str) -> None:
        """Make run ``run_id`` due now in its tree's deadline index, so the next reaper scan (any
        worker's, within about ``reap_interval``) sends its task: the broker refused the send.
        Only an indexed run's deadline is moved, and only earlier (``ZADD XX LT``): a run that
        finished meanwhile is not put back, and one claimed meanwhile is found ``alive`` by the
        reaper. Redis being away too is logged: the run then waits for its old deadline."""
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
        keys = [self.keys.tree_deadlines(root), self.keys.run(run_id), self.keys.run_lease(run_id)]
        out = await self._run_script(self._reap, keys, [run_id, _ms(time.time()), _ms(self.settings.requeue_after)])
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
        return [Message.model_validate_json(m) for m in raw]

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
        key = self.keys.instance_counter(session, agent)
        with redis_errors("journal"):
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.incr(key)
                pipe.expire(key, self.settings.retention)
                n, _ = await pipe.execute()
        return int(n)
