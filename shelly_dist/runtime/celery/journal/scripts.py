"""The Lua scripts that make the run journal, its leases and the join atomic.

Each script is one round trip and one atomic step, named for what it guarantees. Every key a
script touches is passed in ``KEYS`` (DESIGN §3 rule 14) and all of them carry one tree's hash
tag (records, journals, leases, the tree's deadline index: see ``redisio/keys.py``), so every
script runs on a Redis Cluster. The one key of another slot, the session's event stream, is
passed (as the last key) only on a single Redis; on a cluster the journal appends the step's
events right after the script. ``PUBLISH`` names channels, not keys, so it may be called here;
every channel published on is the tree's own (``…:changed``, ``…:ended``), which on a cluster the
registry turns into a sharded ``SPUBLISH`` in the tree's slot (``redisio/sharded.py``).

Fencing: every write to a run (``CHECKPOINT``, ``FINISH``, ``EXPECT``, ``RELEASE``) first checks
that the caller holds the run — its token is the value of the run's lease key, or, for a root run
driven by a coordinator process, the record's ``owner`` — and is refused with ``lease lost``
otherwise. A worker whose lease lapsed (it stalled, or was presumed dead and its run re-enqueued)
can therefore write nothing, however late its writes arrive.

* ``CLAIM`` takes the run's lease (one task advances a run at a time; also when the tree is
  canceled, so the claimer can finish the run as canceled), counts attempts without progress
  (not the claims of a run still waiting on its children: those run no step), leaves a run of
  another config generation untouched (``foreign``) and returns the record, or why not. The
  lease's deadline goes into the tree's deadline index for the reaper. Given the session's
  instance counter (an optional last key, on a single Redis only: it lives in the session's slot),
  a fresh run also draws its instance number in the same step, once.
* ``RENEW`` keeps leases: for each (lease, deadlines) pair of keys it extends the lease and its
  deadline only while the caller still holds it, and answers 1 (kept) or 0 (lost) per lease, so one
  call renews every lease a process holds (:mod:`.renewer`).
* ``EXPECT`` registers a parent's children *before* any is enqueued, so a child that finishes at
  once cannot bring the pending count to zero early; it returns the children not started yet (still
  ``queued``), so a redelivered parent re-enqueues only what may have been lost. A new child's
  deadline (``requeue``) lets the reaper re-send it if its task message never arrives.
* ``CHECKPOINT`` appends messages to the journal and stores the state together, and refuses when
  the journal is not at the offset the writer expects, so a crash can never leave messages without
  their state or the reverse. The step's buffered events ride along (one batch entry on the session
  stream, when it is passed), and the answer carries the tree's cancel flag and the run's ``stop``
  reason (fail-fast), so neither costs a read of its own. With ``rewrite`` the
  messages sent are the whole chat and replace the journaled ones in the same step (an effect
  compacted or trimmed the chat in place), so the journal never holds a mix of the old chat and
  the new.
* ``RELEASE`` lets a suspended run go only while it still waits on a child; when every child has
  already joined it keeps the lease and the caller continues at once.
* ``FINISH`` ends a run and joins its result into the parent: stored only if absent, the pending
  count decremented once per child however often the finish is repeated, nothing written to a
  parent record that has expired. The caller that brings the count to zero enqueues the parent's
  resume (no chords); the same step puts the parent in the deadline index, so the reaper resumes
  it if that caller dies first. A finish of a run that is already terminal is a no-op (answered
  ``{-1, 'terminal'}``, so the caller appends no events either). It may carry the run's last
  checkpoint (the final reply and state, held back by the worker), written first with the same
  offset check as ``CHECKPOINT``: a run whose last step only called the model ends in one round trip.
  A root's end is published on its ``changed`` channel and on its ``ended`` one (what
  ``CeleryRuntime.wait`` listens to: ``changed`` also carries every child's join).
* ``SENT`` records that the broker took a run's task: a run nobody holds (no lease) that waits
  for that task — ``queued``, ``running`` with its lease lapsed (a reaper's re-send), or
  ``waiting`` with its join complete (a resume) — has its deadline moved *later* (``ZADD XX GT``)
  to the backstop, so a message merely waiting behind a backlog in the queue is not re-sent as
  lost after ``requeue_after``. A run claimed meanwhile keeps its lease deadline (the claim
  wrote it; the lease key makes this a no-op), and one that ended is not put back (``XX``). A run
  whose deadline is its suspended model call's due time (``wake_at``: it ran and suspended again
  before its sender recorded the send) keeps it.
* ``RECEIVED`` records that a worker received a run's task and has not claimed it yet (the
  message is prefetched, held for its retry's countdown, or on its way to a thread): the run's
  deadline is pulled in to a lease from now, renewed while the worker lives; so a message a
  worker killed with ``kill -9`` had received is sent again about a lease after the death. A
  claim ends the receipt (the lease supersedes it), and a worker of another config generation
  leaves none: either would hold ``REAP`` back from the run's next deadline.
* ``REAP`` decides, for one run whose deadline passed, whether to re-enqueue it (not while a
  lease or a live worker's receipt of its message stands). It moves the
  deadline forward in the same step, so of several reapers racing only one re-enqueues; each
  re-send of the same run doubles the wait before the next (up to 64 × ``requeue_after``), so a
  long backlog of queued runs is not flooded with duplicates. A claim resets the count.
"""

from __future__ import annotations

from shelly_dist.agent.children import Ending

LEASE_LOST = "lease lost"
"""The prefix of a fencing refusal; :mod:`.journal` turns it into :class:`~.lease.LeaseLost`."""

_FENCE = """
local function holds(record, lease, token)
  if token == '' then return false end
  if redis.call('GET', lease) == token then return true end
  return redis.call('HGET', record, 'owner') == token
end
local function lost(record)
  return redis.error_reply('""" + LEASE_LOST + """: ' .. record)
end
"""

_ENDED = """
local function ended(status)
  return """ + " or ".join(f"status == '{e.value}'" for e in Ending) + """
end
"""
"""``ended(status)``: whether a record's status is one a run never leaves (:data:`.record.TERMINAL`,
spelled from :class:`~shelly_dist.agent.children.Ending`), prepended to every script that asks,
like the fence: the test is written once, not once per script."""

_EVENTS = """
local function add_events(stream, batch, retention)
  if stream and batch ~= '' then
    redis.call('XADD', stream, 'MAXLEN', '~', 20000, '*', 'events', batch)
    redis.call('EXPIRE', stream, retention)
  end
end
"""

_CHUNKED = """
local function chunked(cmd, key, list, from, to)
  to = to or #list
  for i = from or 1, to, 1000 do
    redis.call(cmd, key, unpack(list, i, math.min(i + 999, to)))
  end
end
"""
"""Call ``cmd`` on ``key`` with ``list[from..to]`` (the whole list by default), 1,000 arguments per
call: a list given at once costs one call into Redis instead of one per element (each
``redis.call`` costs ~2 µs of Redis's one thread, the first in a script ~7 µs), and stays under
Lua's limit on unpacked values. Lists of pairs (``ZADD``, ``HSET``) stay whole: 1,000 is even."""

_NEW_RUN = _CHUNKED + """
local function create_run(run, fields, retention)
  if redis.call('EXISTS', run) == 1 then return false end
  local flat = {}
  for f, v in pairs(fields) do flat[#flat + 1] = f; flat[#flat + 1] = v end
  chunked('HSET', run, flat)
  redis.call('EXPIRE', run, retention)
  return true
end
local function new_run(run, fields, run_id, deadlines, requeue_at, tree, retention)
  if create_run(run, fields, retention) then
    redis.call('ZADD', deadlines, requeue_at, run_id)
    redis.call('EXPIRE', deadlines, retention)
  end
  redis.call('SADD', tree, run_id)
  redis.call('EXPIRE', tree, retention)
end
"""
"""Record a run of the tree once (a repeat finds it and writes nothing but its tree membership),
due at ``requeue_at`` until a worker claims it: a delegated child (``EXPECT``, which batches the
tree's writes of all its children: ``create_run`` alone per child), a spawned one
(``SPAWN_START``) and a handoff's peer (``control_scripts.HANDOFF``)."""

EXPECT = _FENCE + _NEW_RUN + """
local parent, lease, expected, tree, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, retention, children, requeue_at = ARGV[1], tonumber(ARGV[2]), cjson.decode(ARGV[3]), ARGV[4]
if not holds(parent, lease, token) then return lost(parent) end
local to_start, members, due, added = {}, {}, {}, 0
for i, child in ipairs(children) do
  local key, child_id, fields = child['key'], child['id'], child['fields']
  local ck = KEYS[5 + i]
  added = added + redis.call('SADD', expected, key)
  if create_run(ck, fields, retention) then
    due[#due + 1] = requeue_at
    due[#due + 1] = child_id
    if fields['status'] == 'queued' then table.insert(to_start, child_id) end
  elseif redis.call('HGET', ck, 'status') == 'queued' then
    table.insert(to_start, child_id)
  end
  members[#members + 1] = child_id
end
if added > 0 then redis.call('HINCRBY', parent, 'pending', added) end
chunked('ZADD', deadlines, due)
chunked('SADD', tree, members)
redis.call('EXPIRE', expected, retention)
redis.call('EXPIRE', tree, retention)
redis.call('EXPIRE', deadlines, retention)
return to_start
"""

CHECKPOINT = _FENCE + _EVENTS + _CHUNKED + """
local record, msgs, root, lease, stream = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, offset, state, status, retention, now, events, rewrite =
  ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
if not holds(record, lease, token) then return lost(record) end
local len = redis.call('LLEN', msgs)
if len ~= offset then
  return redis.error_reply('journal: expected ' .. offset .. ' messages, found ' .. len)
end
if rewrite == '1' then
  redis.call('DEL', msgs)
  len = 0
end
chunked('RPUSH', msgs, ARGV, 9)
local count = len + #ARGV - 8
redis.call('HSET', record, 'state', state, 'status', status, 'msg_count', count, 'attempts', 0, 'updated', now)
redis.call('EXPIRE', record, retention)
if count > 0 then redis.call('EXPIRE', msgs, retention) end
add_events(stream, events, retention)
return {count, redis.call('HGET', root, 'canceled') or '0', redis.call('HGET', record, 'stop') or '',
        redis.call('HGET', record, 'steer') or '0'}
"""

CLAIM = _ENDED + """
local record, lease, root, deadlines, received, counter = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local token, ttl, max_attempts, worker, now, retention, fingerprint, now_ms, run_id, requeue_at =
  ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6], ARGV[7], tonumber(ARGV[8]), ARGV[9],
  ARGV[10]
local was = redis.call('HMGET', record, 'status', 'fingerprint', 'pending', 'state', 'instance_n', 'attempts')
local status = was[1]
if not status then return {'missing'} end  -- every record has a status
if ended(status) then return {'terminal', status} end
local theirs = was[2] or ''
if fingerprint ~= '' and theirs ~= '' and theirs ~= fingerprint then
  -- Left to its own generation: SENT's long deadline (a visibility timeout away) ends with this
  -- first attempt, so a reaper re-sends it to any worker of the queue after requeue_after
  -- (Celery's retry may bring it back to this worker every time).
  redis.call('ZADD', deadlines, 'XX', 'LT', requeue_at, run_id)
  redis.call('DEL', received)  -- this worker will not run it: its receipt must not hold the re-send
  return {'foreign', theirs}
end
if not redis.call('SET', lease, token, 'NX', 'PX', ttl) then return {'busy'} end
-- The lease supersedes the receipt: left standing, it would hold back the reaper's send of a run
-- that suspends (its model call's due time) or is resumed, for up to a lease (REAP).
redis.call('DEL', received)
redis.call('ZADD', deadlines, now_ms + ttl, run_id)
redis.call('EXPIRE', deadlines, retention)
if redis.call('HGET', root, 'canceled') == '1' then return {'canceled'} end
-- A run still waiting on its children runs no step when claimed (its claimer releases it again):
-- a redelivered or re-sent task of it is no attempt that could have killed a worker.
local attempts = tonumber(was[6] or '0')
if not (status == 'waiting' and tonumber(was[3] or '0') > 0) then
  attempts = attempts + 1
  if attempts > max_attempts then
    redis.call('HSET', record, 'attempts', attempts)
    return {'exhausted', tostring(attempts - 1)}
  end
end
local writes = {'status', 'running', 'worker', worker, 'updated', now, 'requeues', 0, 'attempts', attempts}
if counter and not was[4] and not was[5] then
  table.insert(writes, 'instance_n'); table.insert(writes, redis.call('INCR', counter))
  redis.call('EXPIRE', counter, retention)
end
redis.call('HSET', record, unpack(writes))
local out = redis.call('HGETALL', record)
table.insert(out, 1, 'ok')
return out
"""

RENEW = """
local ttl, now_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
local kept = {}
for i = 1, #KEYS / 2 do
  local lease, deadlines = KEYS[2 * i - 1], KEYS[2 * i]
  local token, run_id = ARGV[2 * i + 1], ARGV[2 * i + 2]
  if redis.call('GET', lease) == token then
    redis.call('PEXPIRE', lease, ttl)
    redis.call('ZADD', deadlines, now_ms + ttl, run_id)
    kept[i] = 1
  else
    kept[i] = 0
  end
end
return kept
"""

RELEASE = _FENCE + """
local record, lease, deadlines = KEYS[1], KEYS[2], KEYS[3]
local token, run_id = ARGV[1], ARGV[2]
if not holds(record, lease, token) then return lost(record) end
local pending = tonumber(redis.call('HGET', record, 'pending') or '0')
if pending > 0 then
  redis.call('HSET', record, 'status', 'waiting')
  redis.call('DEL', lease)
  redis.call('ZREM', deadlines, run_id)
end
return pending
"""

DROP = """
local lease, token = KEYS[1], ARGV[1]
if redis.call('GET', lease) == token then redis.call('DEL', lease) return 1 end
return 0
"""

JOINED = """
local function joined(parent, deadlines, retention, resume_at, parent_id, why, mode)
  local left = redis.call('HINCRBY', parent, 'pending', -1)
  redis.call('PUBLISH', parent .. ':changed', why)
  mode = mode or redis.call('HGET', parent, 'mode') or ''
  if left == 0 and mode == 'worker' then
    redis.call('ZADD', deadlines, resume_at, parent_id)
    redis.call('EXPIRE', deadlines, retention)
  end
  return {left, mode}
end
"""
"""A child's entry (or an answer) joined its parent: count it once, wake the parent (``why`` is the
message: ``child|<key>`` names the entry that joined, so a waiting coordinator reads its entries
once they have all been announced, not on every join: ``coordinator._PoolDelegator._entries``;
``mode``: the parent's, when the caller has read it already),
make its resume due when it was the last (the tail of ``FINISH``, of a round's timeout and of an
answer: ``control_scripts.ROUND_EXPIRE``, ``control_scripts.ANSWER``)."""

FINISH = _ENDED + _FENCE + _EVENTS + _CHUNKED + JOINED + """
local record, lease, parent, children, deadlines, msgs = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local stream = KEYS[7]
local token, status, result, now, retention, key, events, run_id, parent_id, resume_at =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local offset, state, m, also = ARGV[11], ARGV[12], tonumber(ARGV[13]), cjson.decode(ARGV[14])
local was = redis.call('HGET', record, 'status')
if ended(was) then return {-1, 'terminal'} end
if not holds(record, lease, token) then return lost(record) end
local writes = {'status', status, 'result', result, 'updated', now, 'ended', now}
if offset ~= '' then  -- the run's last checkpoint, held back to ride with its finish
  local len = redis.call('LLEN', msgs)
  if len ~= tonumber(offset) then
    return redis.error_reply('journal: expected ' .. offset .. ' messages, found ' .. len)
  end
  chunked('RPUSH', msgs, ARGV, 15, 14 + m)
  table.insert(writes, 'state'); table.insert(writes, state)
  table.insert(writes, 'msg_count'); table.insert(writes, len + m)
  if len + m > 0 then redis.call('EXPIRE', msgs, retention) end
end
add_events(stream, events, retention)
for field, value in pairs(also) do table.insert(writes, field); table.insert(writes, value) end
chunked('HSET', record, writes)
redis.call('EXPIRE', record, retention)
redis.call('DEL', lease)
redis.call('ZREM', deadlines, run_id)
if key == '' then
  redis.call('PUBLISH', record .. ':changed', status)  -- only root runs have waiters of their own
  redis.call('PUBLISH', record .. ':ended', status)  -- CeleryRuntime.wait's, which the joins do not wake
  return {-1, ''}
end
local up = redis.call('HMGET', parent, 'status', 'mode')
if not up[1] then return {-1, ''} end  -- expired (every record has a status): never re-create it
if redis.call('HSETNX', children, key, result) == 0 then return {-1, ''} end
redis.call('EXPIRE', children, retention)
local out = joined(parent, deadlines, retention, resume_at, parent_id, 'child|' .. key, up[2] or '')
if out[1] == 0 and out[2] == 'worker' then due_hint() end  -- the one deadline a finish writes
return out
"""

SENT = """
local deadlines, lease, record = KEYS[1], KEYS[2], KEYS[3]
local run_id, backstop_at = ARGV[1], ARGV[2]
if redis.call('EXISTS', lease) == 1 then return 0 end
local status = redis.call('HGET', record, 'status')
if status == 'waiting' and tonumber(redis.call('HGET', record, 'pending') or '0') > 0 then return 0 end
if status ~= 'queued' and status ~= 'running' and status ~= 'waiting' then return 0 end
if status == 'waiting' then  -- a suspended model call's due time is no send's to move (model_waits.py)
  local wake, at = redis.call('HGET', record, 'wake_at'), redis.call('ZSCORE', deadlines, run_id)
  if wake and at and tonumber(wake) == tonumber(at) then return 0 end
end
return redis.call('ZADD', deadlines, 'XX', 'GT', 'CH', backstop_at, run_id)
"""

PULL = """
local deadlines, cut = KEYS[1], ARGV[1]
local late = redis.call('ZRANGEBYSCORE', deadlines, '(' .. cut, '+inf')
for _, run_id in ipairs(late) do redis.call('ZADD', deadlines, 'XX', 'LT', cut, run_id) end
return #late
"""
"""Pull every deadline of a tree later than ``cut`` in to ``cut`` (``runtime/celery/worker/resync.py``):
after a broker connection broke, a task the broker took may be gone, and the run would wait for
``SENT``'s backstop. Only ever earlier; what is due then is decided by ``REAP`` as always."""

RECEIVED = """
local deadlines, lease, record, received = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local run_id, now_ms, ttl, worker, fingerprint = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
if redis.call('EXISTS', lease) == 1 then return 0 end
local status, theirs = unpack(redis.call('HMGET', record, 'status', 'fingerprint'))
-- a worker of another config generation will not run it (CLAIM leaves it 'foreign'): its receipt
-- must not hold back the re-send to a worker of the run's own generation
if fingerprint and fingerprint ~= '' and theirs and theirs ~= '' and theirs ~= fingerprint then return 0 end
if status == 'waiting' and tonumber(redis.call('HGET', record, 'pending') or '0') > 0 then return 0 end
if status ~= 'queued' and status ~= 'running' and status ~= 'waiting' then return 0 end
if status == 'waiting' then  -- a suspended model call's due time is no message's to move (as SENT)
  local wake, at = redis.call('HGET', record, 'wake_at'), redis.call('ZSCORE', deadlines, run_id)
  if wake and at and tonumber(wake) == tonumber(at) then return 0 end
end
redis.call('SET', received, worker, 'PX', ttl)
if redis.call('ZADD', deadlines, 'XX', 'LT', 'CH', now_ms + ttl, run_id) == 1 then
  due_hint()
  return now_ms + ttl
end
return 0
"""
"""A worker received run ``run_id``'s task message (``runtime/celery/journal/renewer.py``): a run
nobody holds that waits for a task (``SENT``'s conditions) is marked received by ``worker`` for
one lease (renewed with the worker's leases while the message is in the process) and its deadline
pulled in to that lease's end (only earlier, only an indexed run), so a reaper sends it again
about a lease after the worker died, instead of the broker after its visibility timeout. Answers
the new deadline (ms) when it moved it, else 0."""

REAP = _ENDED + """
local deadlines, record, lease, received = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local run_id, now_ms, requeue_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local score = redis.call('ZSCORE', deadlines, run_id)
if not score or tonumber(score) > now_ms then return {'skip'} end
local pttl = redis.call('PTTL', lease)
if pttl <= 0 then pttl = redis.call('PTTL', received) end  -- a live worker holds its message
if pttl > 0 then
  redis.call('ZADD', deadlines, now_ms + pttl, run_id)
  return {'alive'}
end
local status = redis.call('HGET', record, 'status')
if not status or ended(status) then
  redis.call('ZREM', deadlines, run_id)
  return {'gone'}
end
if status == 'waiting' and tonumber(redis.call('HGET', record, 'pending') or '0') > 0 then
  redis.call('ZREM', deadlines, run_id)
  return {'waiting'}
end
local n = redis.call('HINCRBY', record, 'requeues', 1)
redis.call('ZADD', deadlines, now_ms + requeue_ms * 2 ^ math.min(n - 1, 6), run_id)
local f = redis.call('HMGET', record, 'root', 'agent', 'depth', 'session', 'task')
return {status, f[1] or run_id, f[2] or '', f[3] or '0', f[4] or '', string.sub(f[5] or '', 1, 80)}
"""


# -- spawn (runtime/celery/children/spawns.py): a parent's spawned children, announced once each ------------

SPAWN_START = _NEW_RUN + """
local spawns, dedup, child, tree, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local child_id, spawned, limit, ttl, fields, requeue_at, retention, detach =
  ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), cjson.decode(ARGV[5]), ARGV[6], tonumber(ARGV[7]), ARGV[8]
local hit = redis.call('GET', dedup)
if hit then return {'dup', hit} end
if redis.call('HEXISTS', spawns, child_id) == 1 then return {'dup', child_id} end
local active = tonumber(redis.call('HGET', spawns, '#active') or '0')
if limit > 0 and active >= limit then return {'full', tostring(active)} end
redis.call('SET', dedup, child_id, 'EX', ttl)
redis.call('HSET', spawns, child_id, spawned)
redis.call('HINCRBY', spawns, '#active', 1)
if detach == '0' then redis.call('HINCRBY', spawns, '#outstanding', 1) end
redis.call('EXPIRE', spawns, retention)
new_run(child, fields, child_id, deadlines, requeue_at, tree, retention)
return {'ok', child_id}
"""

SPAWN_ANNOUNCE = """
local spawns, announce, parent, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local child_id, ended, retention, resume_at, parent_id, detach =
  ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6]
if redis.call('HEXISTS', spawns, '@' .. child_id) == 1 then return {0, ''} end
redis.call('HSET', spawns, '@' .. child_id, '1', child_id, ended)
redis.call('HINCRBY', spawns, '#active', -1)
if detach == '0' then redis.call('HINCRBY', spawns, '#outstanding', -1) end
redis.call('RPUSH', announce, ended)
redis.call('EXPIRE', announce, retention)
redis.call('EXPIRE', spawns, retention)
redis.call('PUBLISH', parent .. ':changed', 'spawn')
if redis.call('HGET', parent, 'spawn_wait') == '1' then
  redis.call('HDEL', parent, 'spawn_wait')
  local left = redis.call('HINCRBY', parent, 'pending', -1)
  if left == 0 and redis.call('HGET', parent, 'mode') == 'worker' then
    redis.call('ZADD', deadlines, resume_at, parent_id)
    return {1, 'resume'}
  end
end
return {1, ''}
"""

SPAWN_SUSPEND = """
local record, lease, deadlines, spawns, announce = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, run_id, cursor = ARGV[1], ARGV[2], tonumber(ARGV[3])
if redis.call('GET', lease) ~= token then return redis.error_reply('lease lost: ' .. record) end
if redis.call('LLEN', announce) > cursor then return 'go' end
if tonumber(redis.call('HGET', spawns, '#outstanding') or '0') <= 0 then return 'done' end
redis.call('HSET', record, 'spawn_wait', '1', 'status', 'waiting')
redis.call('HINCRBY', record, 'pending', 1)
redis.call('DEL', lease)
redis.call('ZREM', deadlines, run_id)
return 'wait'
"""
