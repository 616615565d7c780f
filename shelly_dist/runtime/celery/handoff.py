"""``handoff`` on the pool: the peer runs as the same delegation entry, on any worker.

When a child run on a worker ends with a valid handoff (:func:`shelly_dist.agent.handoff.next_peer`
returned the peer's request), :data:`HANDOFF` ends the child's run (``done``, with ``handoff``
naming the peer's run) *without* joining its parent, and creates the peer's run in the same step
with the child's ``parent`` and ``parent_key``: the parent keeps waiting on the same entry, and the
peer's finish joins it exactly as the child's would have. The peer is a fresh queued run (its
deadline lets the reaper send it if this process dies before enqueueing it), so any worker takes
it; its first step claims the board task again, with the peer's instance name.
"""

from __future__ import annotations

import json
import time
from typing import Any

from shelly_dist.agent import ChildRequest
from shelly_dist.agent.children import peer_run_id
from shelly_dist.runtime.celery.lease import Lease
from shelly_dist.runtime.celery.scripts import _EVENTS, _FENCE

HANDOFF = _FENCE + _EVENTS + """
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
if redis.call('EXISTS', peer) == 0 then
  for f, v in pairs(cjson.decode(fields)) do redis.call('HSET', peer, f, v) end
  redis.call('EXPIRE', peer, retention)
  redis.call('ZADD', deadlines, requeue_at, peer_id)
  redis.call('EXPIRE', deadlines, retention)
end
redis.call('SADD', tree, peer_id)
redis.call('EXPIRE', tree, retention)
return {redis.call('HGET', peer, 'status') or '', 1}
"""
"""End the leased child's run as handed off and create its peer's run on the same entry (fenced;
a repeat finds the child ended and returns the peer's status, with 0: nothing written). The
session's stream is the optional last key (not passed on a cluster: see ``state/keys.py``)."""


async def hand_off(
    lease: Lease, peer: ChildRequest, result: dict[str, Any], *, events: str = "", **extra: str
) -> tuple[str, bool]:
    """End the leased run in favour of ``peer``; returns (the peer's run id, whether it is still
    queued: the caller enqueues it)."""
    store, r = lease.store, lease.record
    keys, settings = store.keys, store.settings
    peer_id = peer_run_id(r.id, peer)
    now = time.time()
    fields = {
        "id": peer_id, "agent": peer.spawned(), "depth": str(peer.depth), "parent": r.parent,
        "parent_key": r.parent_key, "root": r.root, "session": r.session, "mode": "worker", "status": "queued",
        "request": peer.model_dump_json(), "fingerprint": r.fingerprint, "created": str(now), "updated": str(now),
        "pending": "0", "attempts": "0", "msg_count": "0", "task": peer.task[:2000],
    }
    requeue_at = int((now + settings.requeue_after) * 1000)
    args: list[Any] = [lease.token, json.dumps(fields), str(now), settings.retention, r.id, peer_id,
                       requeue_at, events, json.dumps(result)]
    for k, v in extra.items():
        args += [k, v]
    script = store.client.register_script(HANDOFF)
    status, wrote = await store.run_script(
        script,
        [keys.run(r.id), keys.run_lease(r.id), keys.run(peer_id), keys.tree_runs(r.root), keys.tree_deadlines(r.root),
         *store.stream_keys(r.session)],
        args,
        hint=(r.root, requeue_at),
    )
    if int(wrote):  # on a cluster the session's stream is in another slot (state/keys.py)
        await store.append_events(r.session, events)
    return peer_id, str(status) == "queued"
