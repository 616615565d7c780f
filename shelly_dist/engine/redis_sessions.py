"""Saved conversations in Redis: the session store of a distributed engine (DESIGN §3 rule 13).

When the engine has Redis (``distributed.redis_url`` or a Redis broker), every process of the
deployment — coordinators on several hosts, a container with a read-only ``.shelly`` — must see
the same sessions, and none may need a writable directory. So the store keeps the API and the
JSON shapes of :class:`~shelly_dist.engine.sessions.SessionStore` (``meta`` is ``meta.json``,
``messages`` is ``messages.json`` with attachments inline) in one hash per session,
``{prefix}s:{id}:saved``, plus an index ``{prefix}sessions`` scored by ``updated_at``. Both carry
the retention TTL, refreshed on every save; ``list`` drops index entries whose record expired.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from shelly_dist.chats import Message
from shelly_dist.engine.sessions import SessionInfo, check_session_id, now_info
from shelly_dist.errors import StoreError
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import DEFAULT_RETENTION, Keys


class RedisSessionStore:
    """Sessions in Redis, with :class:`SessionStore`'s methods (``save``/``load``/``list``/``delete``)."""

    def __init__(self, client: Callable[[], Any], keys: Keys, *, retention: float = DEFAULT_RETENTION) -> None:
        """``client`` returns the engine's Redis client (opened on first use)."""
        self._client = client
        self.keys = keys
        self.retention = int(retention) or DEFAULT_RETENTION

    def __repr__(self) -> str:
        return f"RedisSessionStore({self.keys.prefix!r})"

    async def prepare(self, session_id: str) -> None:
        """Nothing to prepare: Redis errors surface at the first write of the run anyway."""

    async def save(self, info: SessionInfo, messages: list[Message]) -> SessionInfo:
        """Write ``messages`` and the metadata (recomputed as :meth:`SessionStore.save` does)."""
        stored = now_info(info, messages)
        key = self.keys.saved_session(check_session_id(stored.id))
        dumped = json.dumps([m.model_dump(mode="json") for m in messages], ensure_ascii=False)
        with redis_errors("sessions", key=stored.id):
            pipe = self._client().pipeline(transaction=False)
            pipe.hset(key, mapping={"meta": stored.model_dump_json(), "messages": dumped})
            pipe.expire(key, self.retention)
            pipe.zadd(self.keys.saved_sessions(), {stored.id: stored.updated_at.timestamp()})
            pipe.expire(self.keys.saved_sessions(), self.retention)
            await pipe.execute()
        return stored

    async def load(self, session_id: str) -> tuple[SessionInfo, list[Message]]:
        """The session's metadata and messages; a missing or corrupt one is a ``StoreError``."""
        key = self.keys.saved_session(check_session_id(session_id))
        with redis_errors("sessions", key=session_id):
            meta, raw = await self._client().hmget(key, ["meta", "messages"])
        if meta is None or raw is None:
            raise StoreError(f"sessions: session {session_id} not found in Redis ({key})", key=session_id)
        try:
            return SessionInfo.model_validate_json(meta), [Message.model_validate(m) for m in json.loads(raw)]
        except (ValueError, TypeError, ValidationError) as exc:
            raise StoreError(f"sessions: corrupt session record {key}: {exc}", key=session_id) from exc

    async def list(self) -> list[SessionInfo]:
        """Metadata of every session, most recently updated first; corrupt ones are skipped."""
        index = self.keys.saved_sessions()
        with redis_errors("sessions"):
            ids = [i.decode() if isinstance(i, bytes) else i for i in await self._client().zrevrange(index, 0, -1)]
            pipe = self._client().pipeline(transaction=False)
            for session_id in ids:
                pipe.hget(self.keys.saved_session(session_id), "meta")
            metas = await pipe.execute() if ids else []
            gone = [i for i, m in zip(ids, metas, strict=True) if m is None]
            if gone:
                await self._client().zrem(index, *gone)
        out = []
        for meta in metas:
            if meta is not None:
                try:
                    out.append(SessionInfo.model_validate_json(meta))
                except ValueError:
                    continue
        return sorted(out, key=lambda i: i.updated_at, reverse=True)

    async def delete(self, session_id: str) -> None:
        """Remove a session. Deleting a missing session is a no-op."""
        key = self.keys.saved_session(check_session_id(session_id))
        with redis_errors("sessions", key=session_id):
            pipe = self._client().pipeline(transaction=False)
            pipe.delete(key)
            pipe.zrem(self.keys.saved_sessions(), session_id)
            await pipe.execute()
