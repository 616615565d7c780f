"""The workspace's Lua scripts, in one place, registered once per client (see ``WorkspaceScripts``).

Every key a script touches comes from ``KEYS`` and all of them share the session's hash tag
(``redisio/keys.py``), so they run on a cluster too.
"""

from __future__ import annotations

import weakref

import redis.asyncio as aioredis

# KEYS: channel list. ARGV: the message JSON after its "{" (no id/timestamp), timestamp, ttl.
# The id is the message's position (1-based): assigned and stored in one step, so ids are gapless.
APPEND = """
local id = redis.call('LLEN', KEYS[1]) + 1
redis.call('RPUSH', KEYS[1], '{"id":' .. id .. ',"timestamp":' .. ARGV[2] .. ',' .. ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return id
"""

# KEYS: cursors hash, channel list. ARGV: agent, until, ttl. Moves the cursor forward only and
# never past the last message; returns the cursor.
ACK = """
local current = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local wanted = math.min(tonumber(ARGV[2]), redis.call('LLEN', KEYS[2]))
if wanted > current then
  redis.call('HSET', KEYS[1], ARGV[1], wanted)
  current = wanted
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
return current
"""

# KEYS: lease key. ARGV: token, ttl ms. 1 when the lease was free or already this token's (a
# redelivered wake task takes its own lease again).
ACQUIRE = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

# KEYS: lease key. ARGV: token, ttl ms. 1 when the token still held it (and now holds it longer).
RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# KEYS: lease key. ARGV: token.
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS: the schedules' due index (sorted set). ARGV: member, the score it was read with, the next
# score, ttl. Moves the member only if nobody moved it since it was read: one claimer per due time.
CLAIM_DUE = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
  redis.call('EXPIRE', KEYS[1], ARGV[4])
  return 1
end
return 0
"""

# KEYS: the due index. ARGV: member, the score it was read with. Removes it only if unchanged.
DROP_DUE = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
"""


class WorkspaceScripts:
    """The scripts, registered once per client (redis-py loads each by its sha on first use): use
    :meth:`of`, so the workspaces of every session on one client share them."""

    _by_client: weakref.WeakKeyDictionary[aioredis.Redis, WorkspaceScripts] = weakref.WeakKeyDictionary()

    @classmethod
    def of(cls, client: aioredis.Redis) -> WorkspaceScripts:
        scripts = cls._by_client.get(client)
        if scripts is None:
            scripts = cls._by_client[client] = cls(client)
        return scripts

    def __init__(self, client: aioredis.Redis) -> None:
        self.append = client.register_script(APPEND)
        self.acquire = client.register_script(ACQUIRE)
        self.ack = client.register_script(ACK)
        self.renew = client.register_script(RENEW)
        self.release = client.register_script(RELEASE)
        self.claim_due = client.register_script(CLAIM_DUE)
        self.drop_due = client.register_script(DROP_DUE)
