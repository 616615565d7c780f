"""A provider key's batch desk in Redis: the window of requests waiting to be sent, the flushes (one
vendor batch each), every request's state — the journal that makes a provider batch survive any
crash.

Keys (``Keys.batch(desk, part)``, all tagged by the desk, so each script touches one slot):

- ``window`` — list of the ``custom_id`` s not sent yet, oldest first;
- ``requests`` / ``payloads`` — per ``custom_id``: who asked (run, session, agent, when) and what
  (the chat's messages and the tools, as the direct call would send them);
- ``states`` — per ``custom_id``: ``window``, ``flush:<id>``, ``reply`` (its reply is in
  ``replies``, not yet delivered), ``fallback:<reason>`` (to be called directly), ``done``,
  ``canceled``;
- ``flushes`` — per flush id, its record (:class:`Flush`): its requests, its step (``open``,
  ``uploaded``, ``creating``, ``polling``, ``ended``), the vendor's file and batch ids;
- ``polls`` — sorted set of the flushes by when they are next due (ms);
- ``canceled`` — per flush, how many of its requests were canceled;
- ``lock`` — the process working the desk now (its elected flusher and poller).

The global ``Keys.batch_desks()`` sorted set says when each desk is next due: the pollers read only
what is due (DESIGN §3 rule 17). A writer lowers it before and after its write (an early mark costs
one wasted look); the desk's holder sets it to the desk's next due time after each look.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import redis.asyncio as aioredis

from shelly_dist.runtime.celery.registry import registered
from shelly_dist.runtime.celery.store import run_script
from shelly_dist.state.connection import redis_errors
from shelly_dist.state.keys import Keys

IDLE = 60.0
"""Seconds after which a desk with nothing pending is looked at again (a cheap safety net)."""

ORIGIN = "provider batches"


def ms(seconds: float) -> int:
    return int(seconds * 1000)


@dataclass
class Flush:
    """One vendor batch in the making, as journaled (``flushes``)."""

    cids: list[str]
    state: str = "open"
    opened: float = 0.0
    file: str = ""
    batch: str = ""
    creating: float = 0.0
    """When its create was sent (or is about to be): a create in flight may have reached the vendor."""
    created: float = 0.0
    fails: int = 0
    """Polls failed in a row."""
    status: str = ""
    """The vendor's last word on it (``in_progress``, ``completed``…)."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def of(cls, raw: str) -> Flush:
        data = json.loads(raw)
        if isinstance(data.get("cids"), dict):  # cjson encodes an empty list as an object
            data["cids"] = []
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass
class Request:
    """Who is waiting for one request (``requests``)."""

    run: str
    session: str
    agent: str
    joined: float = field(default_factory=time.time)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def of(cls, raw: str | None) -> Request | None:
        return cls(**json.loads(raw)) if raw else None


class Desk:
    """One provider key's desk (``desk`` is its id) on one Redis."""

    def __init__(self, client: aioredis.Redis, keys: Keys, desk: str, retention: int) -> None:
        self.client = client
        self.keys = keys
        self.id = desk
        self.retention = retention
        self.scripts = registered(client).control

    def key(self, part: str) -> str:
        return self.keys.batch(self.id, part)

    async def mark_due(self, at: float) -> None:
        """Lower the desk's due time to ``at`` (never raise it: a later mark loses to an earlier)."""
        with redis_errors(ORIGIN):
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.zadd(self.keys.batch_desks(), {self.id: ms(at)}, lt=True)  # LT still adds a new member
                pipe.expire(self.keys.batch_desks(), self.retention)
                await pipe.execute()

    async def join(self, cid: str, request: Request, payload: str, *, due: float) -> tuple[str, str, int]:
        """Add request ``cid`` to the window (once); ``(state, reply JSON or '', window size)``.
        The desk is marked due at ``due`` before and after, so a holder that looked in between
        sees it."""
        await self.mark_due(due)
        out = await run_script(self.scripts.batch_join,
                               [self.key(p) for p in ("window", "requests", "payloads", "states", "replies")],
                               [cid, request.to_json(), payload, self.retention], origin=ORIGIN)
        await self.mark_due(due)
        return str(out[0]), str(out[1] or ""), int(out[2])

    # -- the holder's side -------------------------------------------------------------------

    async def lock(self, token: str, ttl: float) -> bool:
        return bool(await run_script(self.scripts.batch_lock, [self.key("lock")], [token, ms(ttl)], origin=ORIGIN))

    async def unlock(self, token: str) -> None:
        await run_script(self.scripts.batch_unlock, [self.key("lock")], [token], origin=ORIGIN)

    async def window(self) -> tuple[int, Request | None]:
        """How many requests wait in the window, and the oldest one's request."""
        with redis_errors(ORIGIN):
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.llen(self.key("window"))
                pipe.lindex(self.key("window"), 0)
                n, first = await pipe.execute()
            oldest = await self.client.hget(self.key("requests"), first) if first else None
        return int(n), Request.of(oldest)

    async def open(self, token: str, fid: str, most: int) -> list[str]:
        """Move up to ``most`` requests of the window into flush ``fid``; its ``custom_id`` s."""
        out = await run_script(self.scripts.batch_open,
                               [self.key(p) for p in ("lock", "window", "flushes", "states", "polls")],
                               [token, fid, most, time.time(), self.retention], origin=ORIGIN)
        return [str(c) for c in out]

    async def save(self, token: str, fid: str, flush: Flush | None, due: float | None = None,
                   states: list[tuple[str, str, str]] = ()) -> bool:  # type: ignore[assignment]
        """Journal flush ``fid`` (``None``: it is over) due at ``due``, and ``(cid, state, reply)``
        changes; False when the lock is no longer ours (nothing written)."""
        flat = [x for triple in states for x in triple]
        out = await run_script(
            self.scripts.batch_save,
            [self.key(p) for p in ("lock", "flushes", "polls", "states", "replies", "payloads")],
            [token, self.retention, fid, flush.to_json() if flush is not None else "",
             "" if due is None else ms(due), *flat], origin=ORIGIN)
        return bool(out)

    async def flushes(self) -> dict[str, Flush]:
        with redis_errors(ORIGIN):
            raw = await self.client.hgetall(self.key("flushes"))
        return {fid: Flush.of(text) for fid, text in raw.items()}

    async def due_flushes(self, now: float) -> list[str]:
        with redis_errors(ORIGIN):
            return [str(f) for f in await self.client.zrangebyscore(self.key("polls"), "-inf", ms(now))]

    async def next_poll(self) -> float | None:
        with redis_errors(ORIGIN):
            first = await self.client.zrange(self.key("polls"), 0, 0, withscores=True)
        return first[0][1] / 1000 if first else None

    async def requests(self, cids: list[str]) -> list[tuple[Request | None, str, str]]:
        """``(request, state, reply JSON)`` of each of ``cids``."""
        if not cids:
            return []
        with redis_errors(ORIGIN):
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.hmget(self.key("requests"), cids)
                pipe.hmget(self.key("states"), cids)
                pipe.hmget(self.key("replies"), cids)
                who, states, replies = await pipe.execute()
        return [(Request.of(w), s or "", r or "") for w, s, r in zip(who, states, replies, strict=True)]

    async def payloads(self, cids: list[str]) -> list[dict[str, Any] | None]:
        if not cids:
            return []
        with redis_errors(ORIGIN):
            raw = await self.client.hmget(self.key("payloads"), cids)
        return [json.loads(p) if p else None for p in raw]

    async def canceled(self, fid: str) -> int:
        with redis_errors(ORIGIN):
            return int(await self.client.hget(self.key("canceled"), fid) or 0)

    async def schedule(self, at: float, collect_window: float) -> None:
        """Set the desk's next due time (the holder, after a look), then lower it again if a request
        joined meanwhile (see the module)."""
        with redis_errors(ORIGIN):
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.zadd(self.keys.batch_desks(), {self.id: ms(at)})
                pipe.expire(self.keys.batch_desks(), self.retention)
                await pipe.execute()
        n, first = await self.window()
        if n and first is not None:
            await self.mark_due(min(at, first.joined + collect_window))

    async def drop(self, cid: str) -> str:
        """A canceled run's request: out of the window, or counted as canceled in its flush."""
        return str(await run_script(self.scripts.batch_drop,
                                    [self.key("window"), self.key("states"), self.key("canceled")],
                                    [cid, self.retention], origin=ORIGIN) or "")


async def due_desks(client: aioredis.Redis, keys: Keys, now: float, limit: int) -> list[str]:
    """The desks due at ``now`` (at most ``limit``), earliest first."""
    with redis_errors(ORIGIN):
        return [str(d) for d in await client.zrangebyscore(keys.batch_desks(), "-inf", ms(now), start=0, num=limit)]


async def next_due(client: aioredis.Redis, keys: Keys) -> float | None:
    """When the earliest desk is due (epoch seconds), ``None`` when no desk is known."""
    with redis_errors(ORIGIN):
        first = await client.zrange(keys.batch_desks(), 0, 0, withscores=True)
    return first[0][1] / 1000 if first else None


async def drop_runs(client: aioredis.Redis, keys: Keys, run_ids: list[str], *, retention: int) -> int:
    """Take the requests of the canceled runs ``run_ids`` that wait on a provider batch out of it
    (:meth:`Desk.drop`): a cancel of their tree; how many were waiting."""
    if not run_ids:
        return 0
    with redis_errors(ORIGIN):
        async with client.pipeline(transaction=False) as pipe:
            for rid in run_ids:
                pipe.hget(keys.run(rid), "state")
            states = await pipe.execute()
    n = 0
    for raw in states:
        wait = (json.loads(raw).get("model_wait") if raw else None) or {}
        payload = wait.get("payload") or {}
        if wait.get("kind") == "provider_batch" and payload.get("desk") and payload.get("custom_id"):
            await Desk(client, keys, str(payload["desk"]), retention).drop(str(payload["custom_id"]))
            n += 1
    return n
