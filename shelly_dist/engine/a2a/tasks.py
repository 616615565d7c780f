"""Where A2A tasks live: in Redis on the pool, so any replica of ``shelly a2a serve`` answers
``tasks/get`` for a task another started and a restarted server loses none; in memory embedded.

A task's id is its session's id, so its record sits with the session's keys (same retention TTL,
same hash slot) and ``shelly runs --session <task id>`` shows its tree. ``tasks/list`` reads a
sorted set of ids by last update, trimmed to the retention window on every write.
"""

from __future__ import annotations

import time

import redis.asyncio as aioredis
from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types.a2a_pb2 import ListTasksRequest, ListTasksResponse, Task
from google.protobuf import json_format

from shelly_dist.errors import UsageError
from shelly_dist.state.connection import redis_errors
from shelly_dist.state.keys import Keys

DEFAULT_PAGE = 50


class RedisTaskStore(TaskStore):
    """The SDK's task store interface on our Redis, under the runtime's key prefix."""

    def __init__(self, client: aioredis.Redis, keys: Keys, *, retention: int) -> None:
        self._client = client
        self._keys = keys
        self._retention = retention

    async def save(self, task: Task, context: ServerCallContext | None = None) -> None:
        now = time.time()
        with redis_errors("a2a tasks"):
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.set(self._keys.a2a_task(task.id), json_format.MessageToJson(task), ex=self._retention)
                pipe.zadd(self._keys.a2a_tasks(), {task.id: now})
                pipe.zremrangebyscore(self._keys.a2a_tasks(), "-inf", now - self._retention)
                pipe.expire(self._keys.a2a_tasks(), self._retention)
                await pipe.execute()

    async def get(self, task_id: str, context: ServerCallContext | None = None) -> Task | None:
        try:
            key = self._keys.a2a_task(task_id)
        except UsageError:  # not an id we could have made (braces, spaces): no such task
            return None
        with redis_errors("a2a tasks"):
            raw = await self._client.get(key)
        return json_format.Parse(raw, Task()) if raw else None

    async def list(self, params: ListTasksRequest, context: ServerCallContext | None = None) -> ListTasksResponse:
        """Newest first; filtered by context and state; ``page_token`` is the offset to go on from."""
        with redis_errors("a2a tasks"):
            ids = await self._client.zrevrange(self._keys.a2a_tasks(), 0, -1)
        tasks = [t for t in [await self.get(i) for i in ids] if t is not None]
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
        with redis_errors("a2a tasks"):
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.delete(self._keys.a2a_task(task_id))
                pipe.zrem(self._keys.a2a_tasks(), task_id)
                await pipe.execute()


def task_store(runtime: object) -> TaskStore:
    """Redis when the runtime is the pool (its client, key prefix and retention), else memory."""
    client = getattr(runtime, "client", None)
    journal = getattr(runtime, "journal", None)
    if client is None or journal is None:
        return InMemoryTaskStore()
    return RedisTaskStore(client, journal.keys, retention=journal.settings.retention)
