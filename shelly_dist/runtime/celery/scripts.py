"""The Lua scripts that make the run journal and the join atomic.

Each script is one round trip and one atomic step, named for what it guarantees:

* ``EXPECT`` registers a parent's children *before* any is enqueued, so a child that finishes at
  once cannot bring the pending count to zero early; it returns the children not started yet (still ``queued``),
  so a redelivered parent re-enqueues only what may have been lost.
* ``CHECKPOINT`` appends messages to the journal and stores the state together, and refuses when
  the journal is not at the offset the writer expects (a second writer), so a crash can never leave
  messages without their state or the reverse. The step's buffered events ride along (one batch
  entry on the session stream), and the answer carries the tree's cancel flag, so a step costs one
  round trip and the next model call needs no extra read to know it may go ahead.
* ``CLAIM`` takes the run's lease (one task advances a run at a time), counts attempts without
  progress, numbers a fresh run's instance once (``<agent>-<slug>-<n>``, unique across workers)
  and returns the record, or why not.
* ``RELEASE`` lets a suspended run go only while it still waits on a child; when every child has
  already joined it keeps the lease and the caller continues at once.
* ``FINISH`` ends a run and joins its result into the parent: stored only if absent, the pending
  count decremented once per child however often the finish is repeated; the caller that brings it
  to zero enqueues the parent's resume (no chords). The run's last events are written first.
"""

from __future__ import annotations

EXPECT = """
local parent, expected, tree = KEYS[1], KEYS[2], KEYS[3]
local retention, prefix, n = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local to_start = {}
for i = 0, n - 1 do
  local key, child_id, fields = ARGV[4 + i * 3], ARGV[5 + i * 3], cjson.decode(ARGV[6 + i * 3])
  if redis.call('SADD', expected, key) == 1 then
    redis.call('HINCRBY', parent, 'pending', 1)
  end
  local ck = prefix .. 'run:' .. child_id
  if redis.call('EXISTS', ck) == 0 then
    for f, v in pairs(fields) do redis.call('HSET', ck, f, v) end
    redis.call('EXPIRE', ck, retention)
  end
  if redis.call('HGET', ck, 'status') == 'queued' then table.insert(to_start, child_id) end
  redis.call('SADD', tree, child_id)
end
redis.call('EXPIRE', expected, retention)
redis.call('EXPIRE', tree, retention)
return to_start
"""

_EVENTS = """
local function add_events(stream, batch, retention)
  if batch ~= '' then
    redis.call('XADD', stream, 'MAXLEN', '~', 20000, '*', 'events', batch)
    redis.call('EXPIRE', stream, retention)
  end
end
"""

CHECKPOINT = _EVENTS + """
local record, msgs, stream, root = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local offset, state, status, retention, now, events = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local len = redis.call('LLEN', msgs)
if len ~= offset then
  return redis.error_reply('journal: expected ' .. offset .. ' messages, found ' .. len)
end
for i = 7, #ARGV do redis.call('RPUSH', msgs, ARGV[i]) end
local count = len + #ARGV - 6
redis.call('HSET', record, 'state', state, 'status', status, 'msg_count', count, 'attempts', 0, 'updated', now)
redis.call('EXPIRE', record, retention)
if count > 0 then redis.call('EXPIRE', msgs, retention) end
add_events(stream, events, retention)
return {count, redis.call('HGET', root, 'canceled') or '0'}
"""

CLAIM = """
local record, lease, root = KEYS[1], KEYS[2], KEYS[3]
local token, ttl, max_attempts, worker, now = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
if redis.call('EXISTS', record) == 0 then return {'missing'} end
local status = redis.call('HGET', record, 'status')
if status == 'done' or status == 'failed' or status == 'canceled' then return {'terminal', status} end
if redis.call('HGET', root, 'canceled') == '1' then return {'canceled'} end
if not redis.call('SET', lease, token, 'NX', 'PX', ttl) then return {'busy'} end
local attempts = redis.call('HINCRBY', record, 'attempts', 1)
if attempts > max_attempts then return {'exhausted', tostring(attempts - 1)} end
redis.call('HSET', record, 'status', 'running', 'worker', worker, 'updated', now)
if KEYS[4] and redis.call('HEXISTS', record, 'state') == 0 and redis.call('HEXISTS', record, 'instance_n') == 0 then
  redis.call('HSET', record, 'instance_n', redis.call('INCR', KEYS[4]))
  redis.call('EXPIRE', KEYS[4], ARGV[6])
end
local out = redis.call('HGETALL', record)
table.insert(out, 1, 'ok')
return out
"""

RELEASE = """
local record, lease, token = KEYS[1], KEYS[2], ARGV[1]
local pending = tonumber(redis.call('HGET', record, 'pending') or '0')
if pending > 0 then
  redis.call('HSET', record, 'status', 'waiting')
  if redis.call('GET', lease) == token then redis.call('DEL', lease) end
end
return pending
"""

FINISH = _EVENTS + """
local record, lease, parent, children, stream = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, status, result, now, retention, key = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
add_events(stream, ARGV[7], retention)
redis.call('HSET', record, 'status', status, 'result', result, 'updated', now, 'ended', now)
for i = 8, #ARGV, 2 do redis.call('HSET', record, ARGV[i], ARGV[i + 1]) end
redis.call('EXPIRE', record, retention)
if redis.call('GET', lease) == token then redis.call('DEL', lease) end
if key == '' then
  redis.call('PUBLISH', record .. ':changed', status)  -- only root runs have waiters of their own
  return {-1, ''}
end
if redis.call('HSETNX', children, key, result) == 0 then return {-1, ''} end
redis.call('EXPIRE', children, retention)
local left = redis.call('HINCRBY', parent, 'pending', -1)
redis.call('PUBLISH', parent .. ':changed', 'child')
return {left, redis.call('HGET', parent, 'mode') or ''}
"""
