"""The task board in Redis: one hash per session, shared by the coordinator and every worker.

Layout (see :class:`~shelly_dist.redisio.keys.Keys`): hash ``{prefix}s:{session}:tasks`` maps each
task id to its JSON; every mutation PUBLISHes the id on ``…:tasks:changed`` as a wake-up hint.

Mutations are optimistic transactions (WATCH the hash, read it, apply the rule in Python,
MULTI/EXEC the write, the TTL refresh and the announcement; retry when another writer got there
first). This keeps one copy of the claim rules, shared with the in-memory board, instead of a Lua
re-implementation; "exactly one winner out of N concurrent claims" follows because every losing
EXEC is retried against the winner's write and then sees ``already assigned``. Boards are small
(tens to hundreds of tasks), so reading the whole hash per mutation is cheap.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import redis.asyncio as aioredis
from redis.exceptions import WatchError

from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import DEFAULT_RETENTION, Keys
from shelly_dist.redisio.subscription import DEFAULT_POLL_INTERVAL, Subscription
from shelly_dist.state.changes import Changes
from shelly_dist.tasks.base import DEFAULT_UNCLAIMED_TIMEOUT, Task
from shelly_dist.tasks.board import BoardBase, Rule


class RedisBoard(BoardBase):
    """The task board of ``session`` in Redis; ``client`` comes from ``redisio.connection.connect``."""

    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys | None = None,
        *,
        session: str,
        retention: int = DEFAULT_RETENTION,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        unclaimed_timeout: float = DEFAULT_UNCLAIMED_TIMEOUT,
    ) -> None:
        super().__init__(unclaimed_timeout=unclaimed_timeout)
        keys = keys or Keys()
        self._client = client
        self._hash = keys.tasks(session)
        self._channel = keys.tasks_changed(session)
        self._retention = int(retention)
        self._poll = poll_interval

    async def get(self, task_id: str) -> Task | None:
        with redis_errors("tasks", task_id=task_id):
            raw = await self._client.hget(self._hash, task_id)
        return None if raw is None else Task.model_validate_json(raw)

    async def _all(self) -> dict[str, Task]:
        with redis_errors("tasks"):
            raw = await self._client.hgetall(self._hash)
        return {task_id: Task.model_validate_json(text) for task_id, text in raw.items()}

    async def _mutate(self, rule: Rule) -> Task:
        with redis_errors("tasks"):
            async with self._client.pipeline(transaction=True) as pipe:
                while True:
                    try:
                        await pipe.watch(self._hash)
                        raw = await pipe.hgetall(self._hash)
                        task = rule({tid: Task.model_validate_json(text) for tid, text in raw.items()})
                        pipe.multi()
                        pipe.hset(self._hash, task.id, task.model_dump_json())
                        pipe.expire(self._hash, self._retention)
                        await pipe.execute()
                        break
                    except WatchError:
                        continue
            # After the transaction, not inside it: a cluster's transactions hold keyed commands
            # only, and a lost announcement costs a watcher one poll interval (DESIGN §3 rule 6).
            await self._client.publish(self._channel, task.id)
        return task

    def changes(self) -> AbstractAsyncContextManager[Changes]:
        return Subscription(self._client, self._channel, poll_interval=self._poll)
