"""Dispatching a delegation's children on the pool: register them in the parent's journal, then
send each one's ``shelly.run_agent`` task (DESIGN §3 rule 1: the parent never waits on them).

Both the worker's executor (a run that delegates suspends) and the coordinator (its top-level run
awaits the entries in Redis) dispatch through here, so a child is registered and sent the same way
whoever its parent runs in.
"""

from __future__ import annotations

import asyncio

from shelly_dist import events
from shelly_dist.agent import ChildRequest, Run
from shelly_dist.runtime.celery.children import round_timeout
from shelly_dist.runtime.celery.journal import Lease
from shelly_dist.runtime.celery.names import RUN_AGENT, Enqueue, task_kwargs


async def dispatch_children(
    enqueue: Enqueue,
    lease: Lease,
    requests: list[ChildRequest],
    iteration: int,
    fingerprint: str,
    parent: Run,
) -> list[str]:
    """Register the children of the leased run, then enqueue those not started yet. A send that is
    lost leaves the child ``queued`` with a deadline: the reaper sends it again."""
    record = lease.record
    ids, to_start = await lease.expect(requests, iteration, fingerprint)
    if any(r.delegation_id for r in requests):  # interactive: each child's wait is bounded
        await round_timeout.watch(lease, requests, ids, iteration, parent.agent.options.question_timeout)
    starting = [(cid, request) for cid, request in zip(ids, requests, strict=True) if cid in to_start]
    # Sent together: a Redis broker's sender pushes the whole fan-out in one LPUSH (fast_send).
    await asyncio.gather(*(enqueue(RUN_AGENT, [cid, record.root],
                                   task_kwargs(request.agent, request.depth, record.session, request.task))
                           for cid, request in starting))
    for cid, request in starting:
        parent.emit(events.RUN_QUEUED, child_run=cid, child_agent=request.agent, depth=request.depth,
                    task=request.task[:200])
    return ids
