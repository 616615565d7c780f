"""The Lua of the pool's control paths: stopping runs, ``ask_user``, interactive rounds, handoff and
the due index's scanner leases.

The sibling of :mod:`.scripts` (the journal's, claim and finish): the same rules hold — every key a
script touches is passed in ``KEYS`` and, but for the due index's own keys, carries one tree's hash
tag (``state/keys.py``), so each runs on a Redis Cluster; fenced writes start with ``holds``. Both
modules only define the text: every script is registered once per client by :mod:`.registry` and
run through :func:`.store.run_script` (fencing refusal → ``LeaseLost``, a full Redis waited out,
a deadline it writes hinted to the due index). The modules that use them say why each exists.
"""

from __future__ import annotations

from shelly_dist.runtime.celery.journal.scripts import _EVENTS, _FENCE, _NEW_RUN, JOINED

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

STOP = """
local reason = ARGV[1]
local stopped = {}
for i = 1, #KEYS do
  local status = redis.call('HGET', KEYS[i], 'status')
  if status and status ~= 'done' and status ~= 'failed' and status ~= 'canceled'
      and redis.call('HSETNX', KEYS[i], 'stop', reason) == 1 then
    table.insert(stopped, i)
  end
end
return stopped
"""
"""Flag each unfinished run not flagged yet with ``stop = reason``; answers the positions flagged."""

# -- handoff (handoff.py) --------------------------------------------------------------------------

HANDOFF = _FENCE + _EVENTS + _NEW_RUN + """
local record, lease, peer, tree, deadlines, stream = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local token, fields, now, retention, run_id = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local peer_id, requeue_at, events, result = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local was = redis.call('HGET', record, 'status')
if was == 'done' or was == 'failed' or was == 'canceled' then
  return {redis.call('HGET', peer, 'status') or '', 0}
end
if not holds(record, lease, token) then return lost(record) end
add_events(stream, events, retention)
redis.call('HSET', record, 'status', 'done', 'result', result, 'updated', now, 'ended', now, 'handoff', peer_id)
for i = 10, #ARGV, 2 do redis.call('HSET', record, ARGV[i], ARGV[i + 1]) end
redis.call('EXPIRE', record, retention)
redis.call('DEL', lease)
redis.call('ZREM', deadlines, run_id)
new_run(peer, cjson.decode(fields), peer_id, deadlines, requeue_at, tree, retention)
return {redis.call('HGET', peer, 'status') or '', 1}
"""
"""End the leased child's run as handed off and create its peer's run on the same entry (fenced;
a repeat finds the child ended and returns the peer's status, with 0: nothing written). The
session's stream is the optional last key (not passed on a cluster: see ``state/keys.py``)."""

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

ANSWER = JOINED + """
local questions, record, children, deadlines, due = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local qid, answer, field, retention = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local resume_at, run_id = ARGV[5], ARGV[6]
if redis.call('HEXISTS', questions, qid) == 0 then return {'unknown'} end
redis.call('HDEL', questions, qid)
redis.call('ZREM', due, qid)
if redis.call('EXISTS', record) == 0 then return {'gone'} end
local status = redis.call('HGET', record, 'status')
if status == 'done' or status == 'failed' or status == 'canceled' then return {'gone'} end
if redis.call('HSETNX', children, field, answer) == 0 then return {'unknown'} end
redis.call('EXPIRE', children, retention)
local out = joined(record, deadlines, retention, resume_at, run_id, 'answer')
return {'ok', out[1], out[2]}
"""
"""Join an answer into the asking run, once (the first answer wins; a timeout is an answer)."""

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

ANSWER_CHILD = _FENCE + """
local parent, lease, parent_children = KEYS[1], KEYS[2], KEYS[3]
local child, children, deadlines = KEYS[4], KEYS[5], KEYS[6]
local token, field, answer, retention, round, resume_at, child_id, stop, gone =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
if not holds(parent, lease, token) then return lost(parent) end
local status = redis.call('HGET', child, 'status')
if not status or status == 'done' or status == 'failed' or status == 'canceled' then
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

ROUND_EXPIRE = JOINED + """
local parent, children, child, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local key, entry, stop, retention, resume_at, parent_id = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
if redis.call('EXISTS', parent) == 0 then return {-1, '', 0} end
if redis.call('HSETNX', children, key, entry) == 0 then return {-1, '', 0} end
redis.call('EXPIRE', children, retention)
local status = redis.call('HGET', child, 'status')
local waiting = 0
if status and status ~= 'done' and status ~= 'failed' and status ~= 'canceled' then
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
