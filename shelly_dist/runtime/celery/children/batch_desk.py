"""A provider key's batch desk in Redis (:class:`RedisDesk`, the pool's
:class:`~shelly_dist.models.batching.desk.DeskStore`): the journal that makes a provider batch
survive any crash.

Keys (``Keys.batch(desk, part)``, all tagged by the desk, so each script touches one slot):

- ``window`` — list of the ``custom_id`` s not sent yet, oldest first;
- ``requests`` / ``payloads`` — per ``custom_id``: who asked (run, session, agent, when) and what
  (the chat's messages and the tools, as the direct call would send them);
- ``states`` / ``replies`` — per ``custom_id``: its state (``models/batching/desk.py``), and its
  reply once it came (priced), kept until the retention passes so a run that asks again takes it;
- ``flushes`` — per flush id, its record (:class:`~shelly_dist.models.batching.desk.Flush`);
- ``polls`` — sorted set of the flushes by when they are next due (ms);
- ``canceled`` — per flush, how many of its requests were canceled;
- ``lock`` — the process working the desk now (its elected flusher and poller).

Every write of the desk's holder is fenced by its lock (``control_scripts.BATCH_*``): a holder that
lost it writes nothing (:class:`~shelly_dist.models.batching.work.Lost`). The global
``Keys.batch_desks()`` sorted set says when each desk is next due, so the pollers read only what is
due (DESIGN §3 rule 17). A joining request lowers it before and after its write (an early mark
costs one wasted look); the holder sets it to the desk's next due time after each look, then
lowers it again if a request joined meanwhile.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis.asyncio as aioredis

from shelly_dist.chats import Message
from shelly_dist.models.batching.api import PROVIDER_BATCH
from shelly_dist.models.batching.desk import Asked, Flush, Request, StateChange
from shelly_dist.models.batching.work import Lost
from shelly_dist.models.completer import ToolSpec
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.journal.registry import registered
from shelly_dist.runtime.celery.journal.store import run_script

IDLE = 60.0
"""Seconds after which a desk with nothing pending is looked at again (a cheap safety net)."""

ORIGIN = "provider batches"

__all__ = ["IDLE", "ORIGIN", "RedisDesk", "asked_json", "drop_runs", "due_desks", "next_due"]


def ms(seconds: float) -> int:
    return int(seconds * 1000)


class _Tool:
    """A tool as a request offered it (name, description, schema), read back from the desk."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.name = str(spec["name"])
        self.description = str(spec.get("description") or "")
        self.input_schema = dict(spec.get("input_schema") or {})


def asked_json(messages: list[Message], tools: list[ToolSpec]) -> str:
    """What a request asks, as the desk keeps it: the chat and the tools."""
    return json.dumps({
        "messages": [m.model_dump(mode="json") for m in messages],
        "tools": [{"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in tools],
    })


class RedisDesk:
    """One provider key's desk (``desk`` is its id) on one Redis; ``token`` is its holder's lock
    token (empty for a process that only joins requests)."""

    def __init__(self, client: aioredis.Redis, keys: Keys, desk: str, retention: int, token: str = "") -> None:
        self.client = client
        self.keys = keys
        self.id = desk
        self.retention = retention
        self.token = token
        self.scripts = registered(client).control

    def key(self, part: str) -> str:
        return self.keys.batch(self.id, part)

    async def mark_due(self, at: float) -> None:
        """Lower the desk's due time to ``at`` (never raise it)."""
        with redis_errors(ORIGIN):
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.zadd(self.keys.batch_desks(), {self.id: ms(at)}, lt=True)  # LT still adds a new member
                pipe.expire(self.keys.batch_desks(), self.retention)
                await pipe.execute()

    async def join(self, cid: str, request: Request, asked: str, *, due: float) -> tuple[str, str, int]:
        """Add request ``cid`` to the window (once); ``(state, reply JSON or '', window size)``."""
        await self.mark_due(due)
        out = await run_script(self.scripts.batch_join,
                               [self.key(p) for p in ("window", "requests", "payloads", "states", "replies")],
                               [cid, request.to_json(), asked, self.retention], origin=ORIGIN)
        await self.mark_due(due)
        return str(out[0]), str(out[1] or ""), int(out[2])

    # -- the holder's side (DeskStore) -----------------------------------------------------------

    async def lock(self, ttl: float) -> bool:
        """Take or keep the desk's lock for ``ttl`` seconds."""
        return bool(await run_script(self.scripts.batch_lock, [self.key("lock")], [self.token, ms(ttl)],
                                     origin=ORIGIN))

    async def unlock(self) -> None:
        await run_script(self.scripts.batch_unlock, [self.key("lock")], [self.token], origin=ORIGIN)

    async def window(self) -> tuple[int, Request | None]:
        with redis_errors(ORIGIN):
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.llen(self.key("window"))
                pipe.lindex(self.key("window"), 0)
                n, first = await pipe.execute()
            oldest = await self.client.hget(self.key("requests"), first) if first else None
        return int(n), Request.of(oldest)

    async def open(self, fid: str, most: int) -> list[str]:
        out = await run_script(self.scripts.batch_open,
                               [self.key(p) for p in ("lock", "window", "flushes", "states", "polls")],
                               [self.token, fid, most, time.time(), self.retention], origin=ORIGIN)
        return [str(c) for c in out]

    async def save(self, fid: str, flush: Flush | None, due: float | None = None,
                   states: list[StateChange] | None = None) -> None:
        out = await run_script(
            self.scripts.batch_save,
            [self.key(p) for p in ("lock", "flushes", "polls", "states", "replies", "payloads", "requests",
                                   "canceled")],
            [self.token, self.retention, fid, flush.to_json() if flush is not None else "",
             "" if due is None else ms(due), json.dumps(states or [])], origin=ORIGIN)
        if not out:
            raise Lost(f"provider batches: desk {self.id}: its lock was taken over")

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
        if not cids:
            return []
        with redis_errors(ORIGIN):
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.hmget(self.key("requests"), cids)
                pipe.hmget(self.key("states"), cids)
                pipe.hmget(self.key("replies"), cids)
                who, states, replies = await pipe.execute()
        return [(Request.of(w), s or "", r or "") for w, s, r in zip(who, states, replies, strict=True)]

    async def asked(self, cids: list[str]) -> list[Asked | None]:
        if not cids:
            return []
        with redis_errors(ORIGIN):
            raw = await self.client.hmget(self.key("payloads"), cids)
        out: list[Asked | None] = []
        for text in raw:
            if not text:
                out.append(None)
                continue
            data = json.loads(text)
            out.append(([Message.model_validate(m) for m in data["messages"]], [_Tool(t) for t in data["tools"]]))
        return out

    async def canceled(self, fid: str) -> int:
        with redis_errors(ORIGIN):
            return int(await self.client.hget(self.key("canceled"), fid) or 0)

    async def hold_off(self, until: float) -> None:
        """While its holder looks at it, the desk is not due for the others (a request joining
        meanwhile lowers it again; the holder sets the real next time when its look ends)."""
        with redis_errors(ORIGIN):
            await self.client.zadd(self.keys.batch_desks(), {self.id: ms(until)}, xx=True)

    async def schedule(self, at: float, collect_window: float) -> None:
        """Set the desk's next due time (after a look), then lower it again if a request joined
        meanwhile (see the module)."""
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
                                    [self.key(p) for p in ("window", "states", "canceled", "requests", "payloads")],
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
    (:meth:`RedisDesk.drop`): a cancel of their tree; how many were waiting."""
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
        if wait.get("kind") == PROVIDER_BATCH and payload.get("desk") and payload.get("custom_id"):
            await RedisDesk(client, keys, str(payload["desk"]), retention).drop(str(payload["custom_id"]))
            n += 1
    return n


