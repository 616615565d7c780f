"""The Lua of the pool's control paths: stopping runs, decisions (``ask_user``, approvals), steering,
interactive rounds, handoff, the due index's scanner leases, suspended model calls and the provider
batches' desks.

The sibling of :mod:`.scripts` (the journal's, claim and finish): the same rules hold — every key a
script touches is passed in ``KEYS`` and, but for the due index's own keys and a batch desk's (which
share the desk's tag), carries one tree's hash tag (``redisio/keys.py``), so each runs on a Redis
Cluster; fenced writes start with ``holds``. Both modules only define the text: every script is
registered once per client by :mod:`.registry` and run through :func:`.store.run_script` (fencing
refusal → ``LeaseLost``, a full Redis waited out, a deadline it writes hinted to the due index). The
modules that use them say why each exists.
"""

from __future__ import annotations

from shelly_dist.runtime.celery.journal.scripts import _ENDED, _EVENTS, _FENCE, _NEW_RUN, JOINED

# -- stopping runs (cancel.py, policy.py): one mechanism, see policy.stop_runs ---------------------

MARK_IF_EXISTS = """
local set = {}
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    redis.call('HSET', KEYS[i], unpack(ARGV))
    table.insert(set, i)
  end
end
return set
"""
"""Set fields on each run record that exists (answers their 1-based positions): a plain HSET on an
expired record would re-create it as a stub without a TTL (the record's writers set the TTL; a
cancel must not be one). All keys are of one tree (one slot)."""

CANCEL = _ENDED + """
local which, fields = ARGV[1], cjson.decode(ARGV[2])
local flat = {}
for f, v in pairs(fields) do flat[#flat + 1] = f; flat[#flat + 1] = v end
local marked = {}
for i = 1, #KEYS do
  local f = redis.call('HMGET', KEYS[i], 'status', 'mode')
  local status = f[1]
  if status and not ended(status) then
    local take
    if which == 'orphan' then take = f[2] == 'coordinator'
    else take = status ~= 'running' end
    if take then
      redis.call('HSET', KEYS[i], unpack(flat))
      table.insert(marked, i)
    end
  end
end
return marked
"""
"""End runs of one tree as canceled, each only if its status, read in the same step, still allows
it: ``idle`` — not ended and not ``running`` (no task advances it: queued, or waiting on children);
``orphan`` — a coordinator's root not ended yet (its coordinator was killed). ``ARGV[2]`` is the
fields to write, one ``cjson`` table. Answers the 1-based positions ended. A status read first and
written after would end a run that a worker claimed, or that finished, in between."""

STOP = _ENDED + """
local reason = ARGV[1]
local stopped = {}
for i = 1, #KEYS do
  local status = redis.call('HGET', KEYS[i], 'status')
  if status and not ended(status)
      and redis.call('HSETNX', KEYS[i], 'stop', reason) == 1 then
    table.insert(stopped, i)
  end
end
return stopped
"""
"""Flag each unfinished run not flagged yet with ``stop = reason``; answers the positions flagged."""

# -- handoff (handoff.py) --------------------------------------------------------------------------

HANDOFF = _ENDED + _FENCE + _EVENTS + _NEW_RUN + """
local record, lease, peer, tree, deadlines, stream = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local token, fields, now, retention, run_id = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local peer_id, requeue_at, events, result, also = ARGV[6], ARGV[7], ARGV[8], ARGV[9], cjson.decode(ARGV[10])
local was = redis.call('HGET', record, 'status')
if ended(was) then
  return {redis.call('HGET', peer, 'status') or '', 0}
end
if not holds(record, lease, token) then return lost(record) end
add_events(stream, events, retention)
local writes = {'status', 'done', 'result', result, 'updated', now, 'ended', now, 'handoff', peer_id}
for field, value in pairs(also) do table.insert(writes, field); table.insert(writes, value) end
redis.call('HSET', record, unpack(writes))
redis.call('EXPIRE', record, retention)
redis.call('DEL', lease)
redis.call('ZREM', deadlines, run_id)
new_run(peer, cjson.decode(fields), peer_id, deadlines, requeue_at, tree, retention)
return {redis.call('HGET', peer, 'status') or '', 1}
"""
"""End the leased child's run as handed off and create its peer's run on the same entry (fenced;
a repeat finds the child ended and returns the peer's status, with 0: nothing written). The
session's stream is the optional last key (not passed on a cluster: see ``redisio/keys.py``)."""

# -- ask_user (questions.py) -----------------------------------------------------------------------

ASK = _FENCE + """
local record, lease, asked, questions, due = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, field, qid, question, retention = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local due_ms = tonumber(ARGV[6])
if not holds(record, lease, token) then return lost(record) end
local known = redis.call('HGET', asked, field)
if known then return {known, 0, redis.call('HEXISTS', questions, known)} end
redis.call('HSET', asked, field, qid)
redis.call('EXPIRE', asked, retention)
redis.call('HSET', questions, qid, question)
redis.call('EXPIRE', questions, retention)
redis.call('HINCRBY', record, 'pending', 1)
if due_ms > 0 then
  redis.call('ZADD', due, due_ms, qid)
  redis.call('EXPIRE', due, retention)
end
return {qid, 1, 1}
"""
"""Register one awaiting ``ask_user`` call of the leased run under id ``qid`` (fenced; idempotent
per call: a call asked before keeps its id). Answers ``{id, new, still open}``."""

ANSWER = _ENDED + JOINED + """
local questions, record, children, deadlines, due = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local qid, answer, field, retention = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local resume_at, run_id = ARGV[5], ARGV[6]
if redis.call('HEXISTS', questions, qid) == 0 then return {'unknown'} end
redis.call('HDEL', questions, qid)
redis.call('ZREM', due, qid)
if redis.call('EXISTS', record) == 0 then return {'gone'} end
local status = redis.call('HGET', record, 'status')
if ended(status) then return {'gone'} end
if redis.call('HSETNX', children, field, answer) == 0 then return {'unknown'} end
redis.call('EXPIRE', children, retention)
local out = joined(record, deadlines, retention, resume_at, run_id, 'answer')
return {'ok', out[1], out[2]}
"""
"""Join an answer into the asking run, once (the first answer wins; a timeout is an answer)."""

# -- steering (steering.py) ------------------------------------------------------------------------

STEER = _ENDED + """
local record, inbox = KEYS[1], KEYS[2]
local message, retention = ARGV[1], ARGV[2]
local status = redis.call('HGET', record, 'status')
if not status then return {'missing', 0} end
if ended(status) then return {'ended', 0} end
local n = redis.call('RPUSH', inbox, message)
redis.call('EXPIRE', inbox, retention)
redis.call('HSET', record, 'steer', n)
return {status, n}
"""
"""Append a steering message to a live run's inbox and count it on its record (``steer``, read
with the claim and every checkpoint, so a run learns of it without a read of its own); nothing
for a run that has ended (answers ``ended``) or never existed (``missing``, never re-created)."""

# -- provider batches (batches/) -------------------------------------------------------------------

_DESK = """
local function desk_holds(lock, token)
  return token ~= '' and redis.call('GET', lock) == token
end
local function keep(key, retention)
  redis.call('EXPIRE', key, retention)
end
"""

BATCH_JOIN = _DESK + """
local window, requests, payloads, states, replies = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local cid, ident, payload, retention = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local state = redis.call('HGET', states, cid)
if state then
  return {state, redis.call('HGET', replies, cid) or '', redis.call('LLEN', window)}
end
redis.call('HSET', requests, cid, ident)
redis.call('HSET', payloads, cid, payload)
redis.call('HSET', states, cid, 'window')
local n = redis.call('RPUSH', window, cid)
keep(window, retention)
keep(requests, retention)
keep(payloads, retention)
keep(states, retention)
return {'window', '', n}
"""
"""A model call joins its provider key's open window, once per ``custom_id`` (a redelivered step
finds its request, and the reply when one came). Answers ``{state, reply or '', window size}``."""

BATCH_OPEN = _DESK + """
local lock, window, flushes, states, polls = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, fid, max, now, retention = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
if not desk_holds(lock, token) then return {} end
local cids = redis.call('LRANGE', window, 0, max - 1)
if #cids == 0 then return {} end
redis.call('LTRIM', window, #cids, -1)
redis.call('HSET', flushes, fid, cjson.encode({cids = cids, state = 'open', opened = tonumber(now)}))
redis.call('ZADD', polls, 0, fid)
for _, cid in ipairs(cids) do redis.call('HSET', states, cid, 'flush:' .. fid) end
keep(window, retention)
keep(flushes, retention)
keep(states, retention)
keep(polls, retention)
return cids
"""
"""Move the oldest ``max`` requests of the window into flush ``fid`` (fenced by the desk's lock), due
at once: the requests of one vendor batch, recorded before anything is sent for them."""

BATCH_SAVE = _DESK + """
local lock, flushes, polls, states, replies, payloads = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local requests, canceled = KEYS[7], KEYS[8]
local token, retention, fid, record, due, changes = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], cjson.decode(ARGV[6])
if not desk_holds(lock, token) then return 0 end
if record == '' then
  redis.call('HDEL', flushes, fid)
  redis.call('ZREM', polls, fid)
  redis.call('HDEL', canceled, fid)
else
  redis.call('HSET', flushes, fid, record)
  if due ~= '' then redis.call('ZADD', polls, due, fid) end
end
for _, change in ipairs(changes) do
  local cid, state, reply = change[1], change[2], change[3]
  if state == 'forget' then
    redis.call('HDEL', requests, cid)
    redis.call('HDEL', payloads, cid)
    redis.call('HDEL', states, cid)
    redis.call('HDEL', replies, cid)
  else
    redis.call('HSET', states, cid, state)
    if reply ~= '' then redis.call('HSET', replies, cid, reply) end
    if state == 'done' then redis.call('HDEL', payloads, cid) end
  end
end
keep(flushes, retention)
keep(polls, retention)
keep(states, retention)
keep(replies, retention)
return 1
"""
"""Journal a flush's record (``''``: it is over) with its next due time, and the requests' states
(and replies) it changed, in one step, fenced by the desk's lock (0: the lock is someone else's).
A request whose flush is over is forgotten (state ``forget``): its run has its reply journaled, so
nothing asks for it again, and a busy desk's hashes (their TTL refreshed by every write) never
grow."""

BATCH_LOCK = """
local lock, token, ms = KEYS[1], ARGV[1], ARGV[2]
local held = redis.call('GET', lock)
if held == token then
  redis.call('PEXPIRE', lock, ms)
  return 1
end
if held then return 0 end
redis.call('SET', lock, token, 'PX', ms)
return 1
"""
"""Take or keep a desk's lock (the one process working its provider key now) for ``ms``."""

BATCH_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""

BATCH_DROP = _DESK + """
local window, states, canceled, requests, payloads = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local cid, retention = ARGV[1], ARGV[2]
local state = redis.call('HGET', states, cid)
if not state then return '' end
if state == 'window' then
  redis.call('LREM', window, 0, cid)
  redis.call('HDEL', requests, cid)
  redis.call('HDEL', payloads, cid)
  redis.call('HDEL', states, cid)
  return state
elseif string.sub(state, 1, 6) == 'flush:' then
  redis.call('HINCRBY', canceled, string.sub(state, 7), 1)
  keep(canceled, retention)
else
  return ''
end
redis.call('HSET', states, cid, 'canceled')
return state
"""
"""A canceled run's request leaves its window (forgotten), or is counted as canceled in its flush
(whose vendor batch is cancelled once every request in it is)."""
# -- suspended model calls (model_waits.py) -------------------------------------------------------

MODEL_SUSPEND = _FENCE + """
local record, lease, children, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, field, run_id, due_ms, waiting_for, now = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6]
if not holds(record, lease, token) then return lost(record) end
if redis.call('HEXISTS', children, field) == 1 then return 0 end
redis.call('HSET', record, 'status', 'waiting', 'attempts', 0, 'waiting_for', waiting_for, 'updated', now,
           'wake_at', due_ms)
redis.call('DEL', lease)
if due_ms > 0 then
  redis.call('ZADD', deadlines, due_ms, run_id)
else
  redis.call('ZREM', deadlines, run_id)
end
return 1
"""
"""Let a run whose model call is suspended go (fenced): ``waiting`` with its deadline at the wait's
due time (the reaper resumes it then: ``REAP`` re-enqueues a waiting run with nothing pending), or
none when only a delivered reply ends the wait. A suspension is progress (the attempts without
progress start again). Answers 0, keeping the lease, when the reply was delivered meanwhile (the
caller takes it at once), else 1. ``wake_at`` names the due time, so the ``SENT`` of a resume task
that ran before its sender recorded the send (the run suspended again meanwhile) leaves the new due
time where it is instead of pushing it to the broker's backstop."""

MODEL_DELIVER = _ENDED + """
local record, children, deadlines, lease = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local field, reply, retention, resume_at, run_id, wait_id = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local f = redis.call('HMGET', record, 'status', 'mode')
if not f[1] or ended(f[1]) then return {'gone', ''} end
if redis.call('HSETNX', children, field, reply) == 0 then return {'duplicate', f[2] or ''} end
redis.call('EXPIRE', children, retention)
redis.call('PUBLISH', record .. ':changed', 'model|' .. wait_id)
if f[1] == 'waiting' and redis.call('EXISTS', lease) == 0 and (f[2] or '') == 'worker' then
  redis.call('ZADD', deadlines, resume_at, run_id)
  redis.call('EXPIRE', deadlines, retention)
  return {'resume', 'worker'}
end
return {'stored', f[2] or ''}
"""
"""Deliver the reply of a suspended model call, once (``HSETNX``: a second delivery is a
``duplicate``). A worker-driven run that waits and that nobody holds is made due (the caller
enqueues its resume now; the reaper does at ``resume_at`` if the caller dies first); a run being
advanced takes it before it lets go (``MODEL_SUSPEND`` looks for it atomically); a coordinator's
run is woken on its channel."""

# -- interactive delegation (interactive.py, round_timeout.py) -------------------------------------

ASK_PARENT = _FENCE + JOINED + """
local record, lease, parent = KEYS[1], KEYS[2], KEYS[3]
local parent_children, deadlines, children = KEYS[4], KEYS[5], KEYS[6]
local token, field, entry, retention, resume_at, parent_id = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
if not holds(record, lease, token) then return lost(record) end
if redis.call('HEXISTS', children, field) == 1 then return {-1, ''} end
if redis.call('EXISTS', parent) == 0 then return {-1, ''} end
local key = redis.call('HGET', record, 'parent_key') or ''
if key == '' or redis.call('HSETNX', parent_children, key, entry) == 0 then return {-1, ''} end
redis.call('EXPIRE', parent_children, retention)
redis.call('HINCRBY', record, 'pending', 1)
return joined(parent, deadlines, retention, resume_at, parent_id, 'child|' .. key)
"""
"""Join the leased child's question into its parent's current round (fenced; once per question;
nothing once the question is answered)."""

ANSWER_CHILD = _ENDED + _FENCE + """
local parent, lease, parent_children = KEYS[1], KEYS[2], KEYS[3]
local child, children, deadlines = KEYS[4], KEYS[5], KEYS[6]
local token, field, answer, retention, round, resume_at, child_id, stop, gone =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
if not holds(parent, lease, token) then return lost(parent) end
local status = redis.call('HGET', child, 'status')
if not status or ended(status) then
  if round ~= '' then
    redis.call('HSETNX', parent_children, round, redis.call('HGET', child, 'result') or gone)
    redis.call('EXPIRE', parent_children, retention)
  end
  return {'gone', 0}
end
if stop ~= '' then redis.call('HSETNX', child, 'stop', stop) end
if redis.call('HSETNX', children, field, answer) == 0 then return {'known', 0} end
redis.call('EXPIRE', children, retention)
if round ~= '' then
  redis.call('HSET', child, 'parent_key', round)
  redis.call('HINCRBY', parent, 'pending', 1)
end
local left = redis.call('HINCRBY', child, 'pending', -1)
redis.call('PUBLISH', child .. ':changed', 'answer')
if left == 0 then
  redis.call('ZADD', deadlines, resume_at, child_id)
  redis.call('EXPIRE', deadlines, retention)
end
return {'ok', left}
"""
"""Answer a waiting child from its leased parent: the answer stored once, the child's join moved
to the parent's ``round`` and counted there (none when closing), its resume due. A child that
has ended joins the round with its result at once."""

ROUND_EXPIRE = _ENDED + JOINED + """
local parent, children, child, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local key, entry, stop, retention, resume_at, parent_id = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
if redis.call('EXISTS', parent) == 0 then return {-1, '', 0} end
if redis.call('HSETNX', children, key, entry) == 0 then return {-1, '', 0} end
redis.call('EXPIRE', children, retention)
local status = redis.call('HGET', child, 'status')
local waiting = 0
if status and not ended(status) then
  redis.call('HSETNX', child, 'stop', stop)
  if status == 'waiting' then waiting = 1 end
end
local out = joined(parent, deadlines, retention, resume_at, parent_id, 'child|' .. key)
table.insert(out, waiting)
return out
"""
"""Time one child out of its parent's round, unless its entry joined first; answers
``{left, parent's mode, 1 when the child is suspended}`` (a suspended child must be resumed to end)."""

# -- the due index's scanners (due.py) -------------------------------------------------------------

ELECT = """
local scanners = KEYS[1]
local me, now, ttl, shards = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local flat = redis.call('HGETALL', scanners)
local holders = {}
for i = 1, #flat, 2 do holders[flat[i]] = flat[i + 1] end
local held, writes = {}, {}
for s = 0, shards - 1 do
  local v = holders[tostring(s)]
  local mine = false
  if not v then
    mine = true
  else
    local sep = string.find(v, '|', 1, true)
    mine = string.sub(v, 1, sep - 1) == me or tonumber(string.sub(v, sep + 1)) <= now
  end
  if mine then
    table.insert(held, s)
    table.insert(writes, tostring(s))
    table.insert(writes, me .. '|' .. tostring(now + ttl))
  end
end
if #writes > 0 then
  redis.call('HSET', scanners, unpack(writes))
  redis.call('PEXPIRE', scanners, ttl * 10)
end
return held
"""
"""Take (or keep) every shard whose scanner lease is free, lapsed or ours; answers the shards held."""

RESIGN = """
local scanners, me = KEYS[1], ARGV[1]
local flat = redis.call('HGETALL', scanners)
for i = 1, #flat, 2 do
  local v = flat[i + 1]
  if string.sub(v, 1, string.find(v, '|', 1, true) - 1) == me then redis.call('HDEL', scanners, flat[i]) end
end
return 1
"""
"""Give up every shard this scanner holds (its broker refuses sends: another worker's may not)."""

SETTLE = """
local shard, versions = KEYS[1], KEYS[2]
local root, seen, at = ARGV[1], ARGV[2], ARGV[3]
if (redis.call('HGET', versions, root) or '0') == seen then
  if at == '' then
    redis.call('ZREM', shard, root)
    redis.call('HDEL', versions, root)
  else
    redis.call('ZADD', shard, at, root)
  end
elseif at ~= '' then
  redis.call('ZADD', shard, 'LT', at, root)
end
return 1
"""
"""Set a checked tree's hint to its earliest deadline (``at``; '' = nothing left: drop it), only
if no writer hinted it since the scanner read version ``seen``; else only lower it."""


HINT = """
local due_hint
do
  local shard, versions = KEYS[#KEYS - 1], KEYS[#KEYS]
  local root, at, ttl = ARGV[#ARGV - 2], ARGV[#ARGV - 1], ARGV[#ARGV]
  table.remove(KEYS); table.remove(KEYS)
  table.remove(ARGV); table.remove(ARGV); table.remove(ARGV)
  due_hint = function()
    redis.call('ZADD', shard, 'LT', at, root)
    redis.call('HINCRBY', versions, root, 1)
    redis.call('EXPIRE', shard, ttl)
    redis.call('EXPIRE', versions, ttl)
  end
end
"""
"""Prefixed to a script on a single Redis (:meth:`DueIndex.run`): takes the two keys and three
args appended to the script's own off again, so the body sees its KEYS and ARGV as written
(``#ARGV`` included), and defines ``due_hint()``, which hints the tree from them. A script that
names ``due_hint`` (:data:`LAZY_HINT`) calls it where it writes a deadline; any other is run with
the hint first (:func:`hinted_text`)."""

LAZY_HINT = "due_hint()"
"""What a script calls where it writes a deadline, when it hints only then (``scripts.FINISH``:
only the join that completes a worker-driven parent's makes a deadline due)."""

NO_HINT = """
local function due_hint() end
"""
"""Prefixed to a lazily hinting script run without the hint (on a cluster, where it is hinted
before and after the script, or with no deadline to hint)."""


def plain_text(body: str) -> str:
    """``body`` as registered to run without the hint in it."""
    return NO_HINT + body if LAZY_HINT in body else body


def hinted_text(body: str) -> str:
    """``body`` with the due index's hint in it: eager (before the body) unless the body calls
    ``due_hint()`` where it writes a deadline. The hint's first write comes before the body's, so
    a Redis refusing writes (full) refuses the hint and nothing else is written; a lazy body's
    first write is then its own."""
    return HINT + body if LAZY_HINT in body else HINT + "due_hint()\n" + body
