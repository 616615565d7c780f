"""``handoff`` on the pool: the peer runs as the same delegation entry, on any worker.

When a child run on a worker ends with a valid handoff (:func:`shelly_dist.agent.handoff.next_peer`
returned the peer's request), ``control_scripts.HANDOFF`` ends the child's run (``done``, with ``handoff``
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
from shelly_dist.runtime.celery.journal import Lease, RunEnd, RunRecord, RunStatus


async def hand_off(
    lease: Lease, peer: ChildRequest, result: dict[str, Any], *, events: str = "", end: RunEnd = RunEnd()
) -> tuple[str, bool]:
    """End the leased run in favour of ``peer``; returns (the peer's run id, whether it is still
    queued: the caller enqueues it)."""
    store, r = lease.store, lease.record
    keys, settings = store.keys, store.settings
    peer_id = peer_run_id(r.id, peer)
    now = time.time()
    fields = RunRecord.new(
        peer_id, agent=peer.spawned(), depth=peer.depth, parent=r.parent, parent_key=r.parent_key, root=r.root,
        session=r.session, request=peer, fingerprint=r.fingerprint, task=peer.task, now=now,
    ).fields()
    requeue_at = int((now + settings.requeue_after) * 1000)
    args: list[Any] = [lease.token, json.dumps(fields), str(now), settings.retention, r.id, peer_id,
                       requeue_at, events, json.dumps(result), end.to_json()]
    script = store.control.handoff  # control_scripts.HANDOFF
    status, wrote = await store.run_script(
        script,
        [keys.run(r.id), keys.run_lease(r.id), keys.run(peer_id), keys.tree_runs(r.root), keys.tree_deadlines(r.root),
         *store.stream_keys(r.session)],
        args,
        hint=(r.root, requeue_at),
    )
    if int(wrote):  # on a cluster the session's stream is in another slot (redisio/keys.py)
        await store.append_events(r.session, events)
    return peer_id, str(status) == RunStatus.QUEUED
