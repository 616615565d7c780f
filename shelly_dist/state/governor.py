"""The provider governor's accounts in Redis, shared by the coordinator and every worker.

The algorithm of :mod:`shelly_dist.models.governor.memory`, step for step, as three Lua scripts
(reserve, settle, learn), each one atomic step over one unit's keys — all tagged by the unit
(``Keys.governor``), so each script runs in one slot of a Redis Cluster. Two processes can never
both take the last request of a minute, and a 429 heard by one pauses the key for all.

The account's parts: ``log`` (granted reservations by time, the sliding window), ``tokens`` (each
grant's input and output tokens), ``state`` (the window's token totals, the pause, the batch paces
of requests, input and output tokens, the latency, the vendor's tokens per estimated token, the
learned limits), ``flying`` (calls in flight, by expiry), ``queue`` (waiters by priority and
fair-share tag), ``due`` (each waiter's turn) and ``here`` (until when a waiter waits in its
process), plus one ``share:<who>`` string per fair-share group with its virtual clock. Every
step is O(1) amortised in the calls made (a grant is trimmed once when it leaves the window, a
stale waiter once); none reads anything in proportion to the waiting runs or the processes.
Time is the Redis server's (``TIME``), so machines whose clocks disagree still share one window.
Every key expires a day after its unit's last call.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from shelly_dist.models.governor.base import BOUND, GRACE, WINDOW, Ask, Decision, KeyLimits, Learned, Settle
from shelly_dist.models.governor.memory import EPSILON, HEAD, HERE, SPIN, STEP, TOLERANCE, WALK
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import Keys

RETENTION = 24 * 3600
"""Seconds a unit's account outlives its last call (its learned limits with it)."""

_COMMON = f"""
local W, BOUND, GRACE, WALK, HEAD, STEP, TTL = {WINDOW}, {BOUND}, {GRACE}, {WALK}, {HEAD}, {int(STEP)}, {RETENTION}
local EPSILON, SPIN, HERE, TOLERANCE = {EPSILON}, {SPIN}, {HERE}, {TOLERANCE}
local function clock(given)
  local now = tonumber(given)
  if now and now > 0 then return now end
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local function num(key, field) return tonumber(redis.call('HGET', key, field) or '0') end
local function pair(text)
  local a, b = string.match(text, '([^,]+),([^,]+)')
  return tonumber(a), tonumber(b)
end
local function effective(st, rpm, itpm, otpm, conc)
  if rpm <= 0 then rpm = num(st, 'l_rpm') end
  if itpm <= 0 then itpm = num(st, 'l_itpm') end
  if otpm <= 0 then otpm = num(st, 'l_otpm') end
  return rpm, itpm, otpm, conc
end
local function pacing(rpm, itpm, tokens)
  local step = 0
  if rpm > 0 then step = W / rpm end
  if itpm > 0 then step = math.max(step, tokens * W / itpm) end
  return step
end
"""

RESERVE = _COMMON + """
local log, tok, st, fly, q, qd, fin, here = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local id, tokens, prio = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local ratio = tonumber(redis.call('HGET', KEYS[3], 'ratio') or '1')
tokens = math.max(1, math.floor(tokens * ratio + 0.5))  -- as the vendor will count them (memory.scaled)
local rpm, itpm, otpm, conc = effective(st, tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]),
                                        tonumber(ARGV[7]))
local timeout, now = tonumber(ARGV[8]), clock(ARGV[9])
-- the window: grants that left it, calls in flight past their timeout, waiters gone stale
local tin, tout = num(st, 'tin'), num(st, 'tout')
local old = redis.call('ZRANGEBYSCORE', log, '-inf', now - W)
for _, gid in ipairs(old) do
  local t = redis.call('HGET', tok, gid)
  if t then
    local a, b = pair(t)
    tin, tout = tin - a, tout - b
  end
  redis.call('HDEL', tok, gid)
end
if #old > 0 then redis.call('ZREMRANGEBYSCORE', log, '-inf', now - W) end
redis.call('ZREMRANGEBYSCORE', fly, '-inf', now)
local stale = redis.call('ZRANGEBYSCORE', qd, '-inf', '(' .. (now - GRACE))
for _, wid in ipairs(stale) do
  redis.call('ZREM', q, wid)
  redis.call('ZREM', here, wid)
end
if #stale > 0 then redis.call('ZREMRANGEBYSCORE', qd, '-inf', '(' .. (now - GRACE)) end
-- room for this call?
local function freed(which, needed)
  local entries = redis.call('ZRANGE', log, 0, WALK - 1, 'WITHSCORES')
  local got, last = 0, now - W
  for i = 1, #entries, 2 do
    local a, b = pair(redis.call('HGET', tok, entries[i]) or '0,0')
    if which == 1 then got = got + a else got = got + b end
    last = tonumber(entries[i + 1])
    if got >= needed then break end
  end
  return math.max(0, last + W - now)
end
local wait, reason = 0, ''
local pause, tat, latency = num(st, 'pause'), num(st, 'tat'), num(st, 'latency')
local tat_in, tat_out = num(st, 'tat_in'), num(st, 'tat_out')
local n = redis.call('ZCARD', log)
if pause > now then
  wait, reason = pause - now, 'paused'
elseif rpm > 0 and n >= rpm then
  local e = redis.call('ZRANGE', log, n - rpm, n - rpm, 'WITHSCORES')
  wait, reason = tonumber(e[2]) + W - now, 'rpm'
elseif itpm > 0 and tin > 0 and tin + tokens > itpm then
  wait, reason = freed(1, tin + tokens - itpm), 'input_tpm'
elseif otpm > 0 and tout >= otpm then
  wait, reason = freed(2, tout - otpm + 1), 'output_tpm'
elseif conc > 0 and redis.call('ZCARD', fly) >= conc then
  wait, reason = math.max(latency, 0.1) / conc, 'max_concurrent'
elseif prio == 'batch' and math.max(tat, tat_in, tat_out) - TOLERANCE > now then
  local paced, limit = tat, 'rpm'
  if tat_in > paced then paced, limit = tat_in, 'input_tpm' end
  if tat_out > paced then paced, limit = tat_out, 'output_tpm' end
  wait, reason = paced - TOLERANCE - now, limit
end
-- its place: a fair-share tag when first seen (a virtual clock per share), by priority
local cls = 1
if prio == 'interactive' then cls = 0 end
local step = pacing(rpm, itpm, tokens)
if step == 0 and conc > 0 then step = math.max(latency, 0.1) / conc end
local score = redis.call('ZSCORE', q, id)
if score then
  score = tonumber(score)
else
  local tag = math.max(now, tonumber(redis.call('GET', fin) or '0'))
  redis.call('SET', fin, tag + math.max(step, EPSILON), 'PX', math.floor((tag + step - now + 2 * W) * 1000))
  score = cls * STEP + tag
end
if wait <= 0 then  -- a waiter ranked before it that waits in its process for its turn goes first
  local ahead = redis.call('ZRANGE', q, 0, HEAD - 1, 'WITHSCORES')
  for i = 1, #ahead, 2 do
    if tonumber(ahead[i + 1]) >= score then break end
    if ahead[i] ~= id and tonumber(redis.call('ZSCORE', here, ahead[i]) or '0') >= now then
      wait, reason = math.max(step, SPIN), 'queue'
      break
    end
  end
end
local out
if wait <= 0 then
  redis.call('ZREM', q, id)
  redis.call('ZREM', qd, id)
  redis.call('ZREM', here, id)
  redis.call('ZADD', log, now, id)
  redis.call('HSET', tok, id, tokens .. ',0')
  tin = tin + tokens
  redis.call('ZADD', fly, now + timeout, id)
  if prio == 'batch' and rpm > 0 then redis.call('HSET', st, 'tat', math.max(tat, now) + W / rpm) end
  if prio == 'batch' and itpm > 0 then redis.call('HSET', st, 'tat_in', math.max(tat_in, now) + tokens * W / itpm) end
  out = {1, '0', ''}
else
  redis.call('ZADD', q, score, id)
  local turn = wait + redis.call('ZRANK', q, id) * step
  redis.call('ZADD', qd, now + turn, id)
  if turn <= BOUND then redis.call('ZADD', here, now + turn + HERE, id) else redis.call('ZREM', here, id) end
  out = {0, tostring(turn), reason}
end
redis.call('HSET', st, 'tin', tin, 'tout', tout)
redis.call('EXPIRE', log, TTL)
redis.call('EXPIRE', tok, TTL)
redis.call('EXPIRE', st, TTL)
redis.call('EXPIRE', fly, TTL)
redis.call('EXPIRE', q, TTL)
redis.call('EXPIRE', qd, TTL)
redis.call('EXPIRE', here, TTL)
return out
"""
"""Grant the call (``{1}``) or say how long it waits and why (``{0, seconds, limit}``), keeping
its place in the queue (see :mod:`shelly_dist.models.governor.memory` for each step's reason)."""

SETTLE = _COMMON + """
local log, tok, st, fly = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, est, real_out, prio = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4]), ARGV[5]
local ratio = tonumber(redis.call('HGET', st, 'ratio') or '1')
local t = redis.call('HGET', tok, id)
local reserved = math.max(1, math.floor(est * ratio + 0.5))
if t then reserved = pair(t) end
local real_in = tonumber(ARGV[3]) or reserved
if tonumber(ARGV[3]) and tonumber(ARGV[3]) > 0 and est > 0 then
  redis.call('HSET', st, 'ratio', 0.8 * ratio + 0.2 * math.min(20, math.max(0.1, tonumber(ARGV[3]) / est)))
end
local latency = tonumber(ARGV[8])
redis.call('ZREM', fly, id)
if latency > 0 then
  local old = num(st, 'latency')
  if old > 0 then latency = 0.8 * old + 0.2 * latency end
  redis.call('HSET', st, 'latency', latency)
end
if t then
  local a, b = pair(t)
  redis.call('HSET', st, 'tin', num(st, 'tin') + real_in - a, 'tout', num(st, 'tout') + real_out - b)
  redis.call('HSET', tok, id, real_in .. ',' .. real_out)
end
if prio == 'batch' then
  local _, itpm, otpm = effective(st, 1, tonumber(ARGV[6]), tonumber(ARGV[7]), 0)
  if itpm > 0 then redis.call('HSET', st, 'tat_in', num(st, 'tat_in') + (real_in - reserved) * W / itpm) end
  if otpm > 0 then
    redis.call('HSET', st, 'tat_out', math.max(num(st, 'tat_out'), clock(ARGV[9])) + real_out * W / otpm)
  end
end
redis.call('EXPIRE', st, TTL)
return 1
"""
"""Replace a grant's estimate by what the call used (the window's totals and, for ``batch``, the
pace); the call is no longer in flight."""

LEARN = _COMMON + """
local st = KEYS[1]
local rpm, itpm, otpm, pause_in, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),
  tonumber(ARGV[4]), clock(ARGV[5])
if rpm > 0 then redis.call('HSET', st, 'l_rpm', rpm) end
if itpm > 0 then redis.call('HSET', st, 'l_itpm', itpm) end
if otpm > 0 then redis.call('HSET', st, 'l_otpm', otpm) end
if pause_in > 0 and now + pause_in > num(st, 'pause') then redis.call('HSET', st, 'pause', now + pause_in) end
redis.call('EXPIRE', st, TTL)
return 1
"""
"""Record the limits a vendor's headers said, and a pause (``pause_in`` seconds from now; a pause
only ever lengthens)."""


class RedisGovernorStore:
    """:class:`~shelly_dist.models.governor.base.GovernorStore` over a ``redis.asyncio`` client.

    ``server_time``: the window runs on the Redis server's clock (the callers' ``now`` is ignored),
    as in production; tests pass ``False`` to drive it with their own clock."""

    def __init__(self, client: aioredis.Redis, *, prefix: str = "shelly:", server_time: bool = True) -> None:
        self._client = client
        self._keys = Keys(prefix)
        self._server_time = server_time
        self._reserve = client.register_script(RESERVE)
        self._settle = client.register_script(SETTLE)
        self._learn = client.register_script(LEARN)

    def _now(self, now: float) -> str:
        return "0" if self._server_time else repr(now)

    def _parts(self, unit: str, *parts: str) -> list[str]:
        return [self._keys.governor(unit, p) for p in parts]

    async def reserve(self, ask: Ask, now: float) -> Decision:
        lim = ask.limits
        keys = self._parts(ask.unit, "log", "tokens", "state", "flying", "queue", "due", f"share:{ask.share or ask.id}",
                           "here")
        args: list[Any] = [ask.id, ask.tokens, ask.priority, lim.rpm, lim.input_tpm, lim.output_tpm,
                           lim.max_concurrent, ask.timeout, self._now(now)]
        with redis_errors("governor"):
            out = await self._reserve(keys=keys, args=args)
        return Decision(True) if int(out[0]) else Decision(False, float(out[1]), str(out[2]))

    async def settle(self, settle: Settle, now: float) -> None:
        keys = self._parts(settle.unit, "log", "tokens", "state", "flying")
        real_in = "" if settle.input_tokens is None else settle.input_tokens
        args: list[Any] = [settle.id, settle.estimated, real_in, settle.output_tokens, settle.priority,
                           settle.limits.input_tpm, settle.limits.output_tpm, settle.latency, self._now(now)]
        with redis_errors("governor"):
            await self._settle(keys=keys, args=args)

    async def learn(self, unit: str, learned: Learned, now: float) -> None:
        lim = learned.limits
        pause_in = max(0.0, learned.pause_until - now) if learned.pause_until else 0.0
        with redis_errors("governor"):
            await self._learn(keys=self._parts(unit, "state"),
                              args=[lim.rpm, lim.input_tpm, lim.output_tpm, pause_in, self._now(now)])

    async def limits(self, unit: str) -> KeyLimits:
        with redis_errors("governor"):
            rpm, itpm, otpm = await self._client.hmget(self._keys.governor(unit, "state"),
                                                       ["l_rpm", "l_itpm", "l_otpm"])
        return KeyLimits(rpm=int(float(rpm or 0)), input_tpm=int(float(itpm or 0)), output_tpm=int(float(otpm or 0)))
