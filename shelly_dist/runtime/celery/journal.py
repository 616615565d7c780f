"""Runs as journals in Redis: the record, the append-only message list, the children's results.

A run record (hash ``…:run:{id}``) holds the run's identity (agent, depth, parent, root, session),
its status (``queued → running ⇄ waiting → done | failed | canceled``), its state (a
:class:`~shelly_dist.agent.RunState` without messages) and, once ended, its result. Messages are
appended to ``…:run:{id}:msgs`` as deltas, never rewritten. Every write goes through one of the
scripts in :mod:`.scripts`, so each is a single atomic round trip.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import WatchError

from shelly_dist.agent import ChildRequest, DelegateEntry, RunState
from shelly_dist.chats import Message
from shelly_dist.runtime.celery import scripts
from shelly_dist.runtime.celery.settings import RuntimeSettings
from shelly_dist.state.connection import redis_errors
from shelly_dist.state.keys import Keys

TERMINAL = frozenset({"done", "failed", "canceled"})

SESSION_RUNS_MAX = 10_000
"""Root runs a session's index keeps (the newest); older ones drop out of ``shelly runs`` and
``shelly cancel --session`` (their records still expire by retention)."""


def child_run_id(parent_id: str, request: ChildRequest, iteration: int) -> str:
    """Deterministic, so a redelivered parent step names the same children again."""
    digest = hashlib.sha1(f"{iteration}:{request.key}".encode()).hexdigest()[:8]
    return f"{parent_id}-{digest}"


def child_key(request: ChildRequest, iteration: int) -> str:
    """The field under which the child's entry joins the parent (unique per suspension)."""
    return f"{iteration}:{request.key}"


@dataclass
class Claim:
    """The outcome of trying to start work on a run."""

    outcome: str
    """``ok``, ``busy``, ``terminal``, ``canceled``, ``missing`` or ``exhausted``."""
    record: dict[str, str]
    detail: str = ""


class Journal:
    """Reads and writes run records for one Redis and key prefix."""

    def __init__(self, client: aioredis.Redis, settings: RuntimeSettings) -> None:
        self.client = client
        self.settings = settings
        self.keys = Keys(settings.key_prefix)
        self._expect = client.register_script(scripts.EXPECT)
        self._checkpoint = client.register_script(scripts.CHECKPOINT)
        self._claim = client.register_script(scripts.CLAIM)
        self._release = client.register_script(scripts.RELEASE)
        self._finish = client.register_script(scripts.FINISH)

    # -- creation ---------------------------------------------------------------------------

    async def create_root(
        self, run_id: str, *, agent: str, session: str, mode: str, task: str, fingerprint: str,
        messages: list[Message] | None = None, if_absent: bool = False,
    ) -> bool:
        """A top-level run: ``mode`` is ``coordinator`` (in the CLI process) or ``worker`` (its
        first user ``messages`` are stored for the worker that starts it).

        With ``if_absent`` nothing is written when a record ``run_id`` exists (or is created by
        someone else meanwhile): the id is an idempotency key. Returns whether this call created it.
        """
        now = str(time.time())
        fields = {
            "id": run_id, "agent": agent, "depth": "0", "parent": "", "parent_key": "", "root": run_id,
            "session": session, "mode": mode, "status": "queued" if mode == "worker" else "running",
            "task": task[:2000], "fingerprint": fingerprint, "created": now, "updated": now,
            "pending": "0", "attempts": "0", "msg_count": "0",
        }
        if messages:
            fields["input"] = json.dumps([m.model_dump(mode="json") for m in messages])
        key = self.keys.run(run_id)
        with redis_errors("journal"):
            async with self.client.pipeline(transaction=True) as pipe:
                if if_absent:
                    await pipe.watch(key)
                    if await pipe.exists(key):
                        return False
                    pipe.multi()
                pipe.hset(key, mapping=fields)
                pipe.expire(key, self.settings.retention)
                index = self.keys.session_runs(session)
                pipe.zadd(index, {run_id: time.time()})
                # Trimmed on every write: roots past retention (their records are gone) and the
                # oldest beyond SESSION_RUNS_MAX (a long-lived session must not grow without bound).
                pipe.zremrangebyscore(index, "-inf", time.time() - self.settings.retention)
                pipe.zremrangebyrank(index, 0, -SESSION_RUNS_MAX - 1)
                pipe.expire(index, self.settings.retention)
                pipe.sadd(self.keys.tree_runs(run_id), run_id)
                pipe.expire(self.keys.tree_runs(run_id), self.settings.retention)
                try:
                    await pipe.execute()
                except WatchError:
                    return False
        return True

    async def expect_children(
        self, parent: dict[str, str], requests: list[ChildRequest], iteration: int, fingerprint: str
    ) -> tuple[list[str], list[str]]:
        """Register the children before enqueueing; returns (all child ids, ids not started yet)."""
        parent_id, root = parent["id"], parent["root"]
        argv: list[Any] = [self.settings.retention, self.keys.prefix, len(requests)]
        ids = []
        now = str(time.time())
        for r in requests:
            cid = child_run_id(parent_id, r, iteration)
            ids.append(cid)
            fields = {
                "id": cid, "agent": r.agent, "depth": str(r.depth), "parent": parent_id,
                "parent_key": child_key(r, iteration), "root": root, "session": parent["session"],
                "mode": "worker", "status": "queued", "request": r.model_dump_json(),
                "fingerprint": fingerprint, "created": now, "updated": now, "pending": "0",
                "attempts": "0", "msg_count": "0", "task": r.task[:2000],
            }
            argv += [child_key(r, iteration), cid, json.dumps(fields)]
        keys = [self.keys.run(parent_id), self.keys.run_expected(parent_id), self.keys.tree_runs(root)]
        with redis_errors("journal"):
            to_start = await self._expect(keys=keys, args=argv)
        return ids, list(to_start)

    # -- advancing ---------------------------------------------------------------------------

    async def claim(
        self, run_id: str, root: str, token: str, worker: str, *, session: str = "", agent: str = ""
    ) -> Claim:
        """Take the run's lease; with ``session`` and ``agent`` (the task's kwargs) a fresh run also
        gets its instance number (``instance_n``) in the same round trip."""
        keys = [self.keys.run(run_id), self.keys.run_lease(run_id), self.keys.run(root or run_id)]
        if session and agent:
            keys.append(self.keys.instance_counter(session, agent))
        args = [token, self.settings.lease_ms, self.settings.max_attempts, worker, str(time.time()),
                self.settings.retention]
        with redis_errors("journal"):
            out = await self._claim(keys=keys, args=args)
        outcome = str(out[0])
        if outcome != "ok":
            return Claim(outcome, {}, str(out[1]) if len(out) > 1 else "")
        flat = out[1:]
        return Claim("ok", dict(zip(flat[::2], flat[1::2], strict=True)))

    async def messages(self, run_id: str, count: int) -> list[Message]:
        if count <= 0:
            return []
        with redis_errors("journal"):
            raw = await self.client.lrange(self.keys.run_msgs(run_id), 0, count - 1)
        return [Message.model_validate_json(m) for m in raw]

    async def checkpoint(
        self,
        record: dict[str, str],
        offset: int,
        state: RunState,
        new: list[Message],
        status: str,
        events: str = "",
    ) -> tuple[int, bool]:
        """Append ``new`` after ``offset`` journaled messages, store ``state`` and write the
        ``events`` batch, in one round trip; returns (journaled count, tree canceled)."""
        run_id = record["id"]
        args: list[Any] = [offset, state.model_dump_json(exclude={"messages"}), status,
                           self.settings.retention, str(time.time()), events]
        args += [m.model_dump_json() for m in new]
        keys = [self.keys.run(run_id), self.keys.run_msgs(run_id), self.keys.events(record["session"]),
                self.keys.run(record.get("root") or run_id)]
        with redis_errors("journal"):
            count, canceled = await self._checkpoint(keys=keys, args=args)
        return int(count), canceled == "1"

    async def drop_lease(self, run_id: str, token: str) -> None:
        """Give the run up after a failed attempt, so a retry need not wait out the lease."""
        lease = self.keys.run_lease(run_id)
        with redis_errors("journal"):
            async with self.client.pipeline(transaction=True) as pipe:
                await pipe.watch(lease)
                if await pipe.get(lease) == token:
                    pipe.multi()
                    pipe.delete(lease)
                    await pipe.execute()

    async def release(self, run_id: str, token: str) -> int:
        """Let a suspended run go; returns the children still pending (0: keep going now)."""
        with redis_errors("journal"):
            return int(await self._release(keys=[self.keys.run(run_id), self.keys.run_lease(run_id)], args=[token]))

    async def children(self, run_id: str, keys: list[str]) -> dict[str, DelegateEntry]:
        if not keys:
            return {}
        with redis_errors("journal"):
            raw = await self.client.hmget(self.keys.run_children(run_id), keys)
        return {k: DelegateEntry.model_validate_json(v) for k, v in zip(keys, raw, strict=True) if v}

    async def finish(
        self, record: dict[str, str], token: str, status: str, result: dict[str, Any], *, events: str = "",
        **fields: str,
    ) -> tuple[int, str]:
        """End the run (writing its last ``events``) and join its result into its parent; returns
        (children left, parent mode).

        ``left == 0`` means this call completed the parent's join: the caller enqueues its resume.
        """
        run_id, parent = record["id"], record.get("parent", "")
        keys = [self.keys.run(run_id), self.keys.run_lease(run_id),
                self.keys.run(parent or run_id), self.keys.run_children(parent or run_id),
                self.keys.events(record["session"])]
        args: list[Any] = [token, status, json.dumps(result), str(time.time()), self.settings.retention,
                           record.get("parent_key", "") if parent else "", events]
        for k, v in fields.items():
            args += [k, v]
        with redis_errors("journal"):
            left, mode = await self._finish(keys=keys, args=args)
        return int(left), str(mode)

    # -- reading -------------------------------------------------------------------------------

    async def record(self, run_id: str) -> dict[str, str]:
        with redis_errors("journal"):
            return dict(await self.client.hgetall(self.keys.run(run_id)))

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
