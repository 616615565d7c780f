"""The blackboard in Redis: one hash per session, shared by the coordinator and every worker.

Layout (see :class:`~shelly_dist.redisio.keys.Keys`): hash ``{prefix}s:{session}:state`` maps each
key to its entry JSON ``{"version":N,"author":…,"updated_at":…,"value":…}``; every write and
delete PUBLISHes the key on ``…:state:changed``, which watchers use as a wake-up hint only.

Writes are one Lua script, so "read the version, bump it, write, refresh the TTL, announce" is
atomic across processes. The script never decodes the value: it reads the version from the fixed
head of the stored JSON and splices the pre-encoded value into the new record, so no JSON is
re-encoded by Lua (cjson mangles empty arrays and large integers).
"""

from __future__ import annotations

import json
import time
from contextlib import AbstractAsyncContextManager
from typing import Any

import redis.asyncio as aioredis

from shelly_dist.identity import agent_name
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import DEFAULT_RETENTION, Keys
from shelly_dist.redisio.subscription import DEFAULT_POLL_INTERVAL, Subscription
from shelly_dist.state.base import Entry, StoreBase, check_key, dump_value
from shelly_dist.state.changes import Changes

# KEYS: hash, channel. ARGV: key, value JSON, author JSON, timestamp, ttl, expected version ("" = any).
# Returns the new version, or -1 when the expected version did not match.
_WRITE_VERSIONED = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
local v = 0
if old then v = tonumber(string.match(old, '^{"version":(%d+),')) or 0 end
if ARGV[6] ~= '' and tonumber(ARGV[6]) ~= v then return -1 end
v = v + 1
redis.call('HSET', KEYS[1], ARGV[1], '{"version":' .. v .. ',"author":' .. ARGV[3] ..
  ',"updated_at":' .. ARGV[4] .. ',"value":' .. ARGV[2] .. '}')
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('PUBLISH', KEYS[2], ARGV[1])
return v
"""

# KEYS: hash, channel. ARGV: key. Returns 1 when a key was removed (and announced), else 0.
_DELETE_ANNOUNCED = """
local n = redis.call('HDEL', KEYS[1], ARGV[1])
if n > 0 then redis.call('PUBLISH', KEYS[2], ARGV[1]) end
return n
"""


class RedisStore(StoreBase):
    """The blackboard of ``session`` in Redis; ``client`` comes from ``redisio.connection.connect``."""

    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys | None = None,
        *,
        session: str,
        retention: int = DEFAULT_RETENTION,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> None:
        keys = keys or Keys()
        self._client = client
        self._hash = keys.state(session)
        self._channel = keys.state_changed(session)
        self._retention = int(retention)
        self._poll = poll_interval
        self._write_script = client.register_script(_WRITE_VERSIONED)
        self._delete_script = client.register_script(_DELETE_ANNOUNCED)

    async def get(self, key: str) -> Entry | None:
        with redis_errors(self.origin, key=key):
            raw = await self._client.hget(self._hash, key)
        return None if raw is None else Entry.model_validate_json(raw)

    async def _write(self, key: str, value: Any, expected: int | None) -> Entry | None:
        text = dump_value(self.origin, check_key(self.origin, key), value)
        author, now = agent_name(), time.time()
        args = [
            key,
            text,
            json.dumps(author),
            repr(now),
            self._retention,
            "" if expected is None else expected,
        ]
        with redis_errors(self.origin, key=key):
            version = int(await self._write_script(keys=[self._hash, self._channel], args=args))
        if version < 0:
            return None
        return Entry(value=json.loads(text), author=author, updated_at=now, version=version)

    async def set(self, key: str, value: Any) -> Entry:
        entry = await self._write(key, value, None)
        assert entry is not None
        return entry

    async def compare_and_set(self, key: str, value: Any, version: int) -> Entry | None:
        return await self._write(key, value, version)

    async def delete(self, key: str) -> bool:
        with redis_errors(self.origin, key=key):
            return bool(await self._delete_script(keys=[self._hash, self._channel], args=[key]))

    async def keys(self) -> list[str]:
        with redis_errors(self.origin):
            return sorted(await self._client.hkeys(self._hash))

    async def entries(self) -> dict[str, Entry]:
        with redis_errors(self.origin):
            raw = await self._client.hgetall(self._hash)
        return {key: Entry.model_validate_json(raw[key]) for key in sorted(raw)}

    def changes(self) -> AbstractAsyncContextManager[Changes]:
        return Subscription(self._client, self._channel, poll_interval=self._poll)
