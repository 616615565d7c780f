"""Where A2A tasks live: in Redis on the pool, so any replica of ``shelly a2a serve`` answers
``tasks/get`` for a task another started and a restarted server loses none; in memory embedded.

A task's id is its session's id, so its record sits with the session's keys (same retention TTL,
same hash slot) and ``shelly runs --session <task id>`` shows its tree. ``tasks/list`` reads a
sorted set of ids by last update, trimmed to the retention window on every write.

Each task belongs to the caller that created it (the user the caller's token names, ``""``
without tokens): its owner is kept beside it, ``tasks/get`` of another caller's task finds none,
and each caller's ``tasks/list`` reads its own sorted set — the in-memory store of the SDK keeps
owners apart the same way.
"""

from __future__ import annotations

import hashlib
import time

import redis.asyncio as aioredis
from a2a.server.context import ServerCallContext
from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types.a2a_pb2 import ListTasksRequest, ListTasksResponse, Task
from google.protobuf import json_format

from shelly_dist.errors import UsageError
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import Keys

DEFAULT_PAGE = 50


class RedisTaskStore(TaskStore):
    """The SDK's task store interface on our Redis, under the runtime's key prefix."""

    def __init__(self, client: aioredis.Redis, keys: Keys, *, retention: int) -> None:
        self._client = client
        self._keys = keys
        self._retention = retention

    def _index(self, owner: str) -> str:
        """The owner's sorted set of task ids (the shared one without tokens, as before)."""
        base = self._keys.a2a_tasks()
        return base if not owner else f"{base}:{hashlib.sha256(owner.encode()).hexdigest()[:16]}"

    async def save(self, task: Task, context: ServerCallContext | None = None) -> None:
        owner = resolve_user_scope(context) if context is not None else ""
        now = time.time()
        index = self._index(owner)
        with redis_errors("a2a tasks"):
            # The first save names the owner; a later save by another caller cannot take it over.
            if not await self._client.set(self._keys.a2a_task_owner(task.id), owner, nx=True, ex=self._retention):
                kept = await self._client.get(self._keys.a2a_task_owner(task.id))
                if (kept.decode() if isinstance(kept, bytes) else kept or "") != owner:
                    raise PermissionError(f"a2a: task {task.id} belongs to another caller")
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.set(self._keys.a2a_task(task.id), json_format.MessageToJson(task), ex=self._retention)
                pipe.expire(self._keys.a2a_task_owner(task.id), self._retention)
                pipe.zadd(index, {task.id: now})
                pipe.zremrangebyscore(index, "-inf", now - self._retention)
                pipe.expire(index, self._retention)
                await pipe.execute()

    async def get(self, task_id: str, context: ServerCallContext | None = None) -> Task | None:
        """The task, when the caller of ``context`` owns it (``None`` context: any, for the server
        itself)."""
        try:
            key = self._keys.a2a_task(task_id)
        except UsageError:  # not an id we could have made (braces, spaces): no such task
            return None
        with redis_errors("a2a tasks"):
            raw, owner = await self._client.mget(key, self._keys.a2a_task_owner(task_id))
        if not raw:
            return None
        owner = owner.decode() if isinstance(owner, bytes) else owner or ""
        if context is not None and owner != resolve_user_scope(context):
            return None
        return json_format.Parse(raw, Task())

    async def list(self, params: ListTasksRequest, context: ServerCallContext | None = None) -> ListTasksResponse:
        """Newest first, the caller's own; filtered by context and state; ``page_token`` is the
        offset to go on from."""
        owner = resolve_user_scope(context) if context is not None else ""
        with redis_errors("a2a tasks"):
            ids = await self._client.zrevrange(self._index(owner), 0, -1)
        tasks = [t for t in [await self.get(i, context) for i in ids] if t is not None]
        if params.context_id:
            tasks = [t for t in tasks if t.context_id == params.context_id]
        if params.status:
            tasks = [t for t in tasks if t.status.state == params.status]
        start = int(params.page_token or 0)
        size = params.page_size or DEFAULT_PAGE
        page = tasks[start:start + size]
        following = str(start + size) if start + size < len(tasks) else ""
        return ListTasksResponse(tasks=page, next_page_token=following, total_size=len(tasks), page_size=size)

    async def delete(self, task_id: str, context: ServerCallContext | None = None) -> None:
        if context is not None and await self.get(task_id, context) is None:
            return  # another caller's (or no) task
        owner = resolve_user_scope(context) if context is not None else ""
        with redis_errors("a2a tasks"):
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.delete(self._keys.a2a_task(task_id), self._keys.a2a_task_owner(task_id))
                pipe.zrem(self._index(owner), task_id)
                await pipe.execute()


def task_store(runtime: object) -> TaskStore:
    """Redis when the runtime is the pool (its client, key prefix and retention), else memory."""
    client = getattr(runtime, "client", None)
    journal = getattr(runtime, "journal", None)
    if client is None or journal is None:
        return InMemoryTaskStore()
    return RedisTaskStore(client, journal.keys, retention=journal.settings.retention)
