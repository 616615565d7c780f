"""A child's end joins its parent: finish the run, store its entry in the parent's record, and
resume the parent once every child has joined (DESIGN §3 rules 1 and 4).

The join itself is the ``FINISH`` script (store the entry if absent, decrement the parent's
pending count once), so a duplicate finish joins nothing twice; the call that brings the count to
zero sends the parent's ``shelly.resume_agent``. A coordinator's parent is woken by the join's
publish instead. Called by whatever ends a run: the worker's executor, a worker that cannot open
its engine, the coordinator answering questions and closing interactive children.
"""

from __future__ import annotations

import asyncio

from shelly_dist.agent import DelegateEntry
from shelly_dist.agent.children import Ending
from shelly_dist.runtime.celery.journal import Journal, Lease, RunEnd
from shelly_dist.runtime.celery.names import RESUME_AGENT, Enqueue


async def finish_and_join(
    journal: Journal,
    enqueue: Enqueue,
    lease: Lease,
    ending: Ending,
    entry: DelegateEntry,
    *,
    events: str = "",
    end: RunEnd = RunEnd(),
) -> None:
    """End the run and join its entry into its parent; the call that completes the parent's join
    enqueues the parent's resume (coordinators are woken by the join's publish instead). If this
    process dies between the two, the reaper sends the resume (the finish put the parent in the
    tree's deadline index)."""
    left, mode = await lease.finish(ending, entry.journal_json(), events=events, end=end)
    if left == 0 and mode == "worker":
        await enqueue_resume(journal, enqueue, lease.record.parent)


async def enqueue_resume(journal: Journal, enqueue: Enqueue, run_id: str) -> None:
    """Send ``shelly.resume_agent`` for a run whose children have all joined."""
    parent = await journal.record(run_id)
    if parent is not None:
        await enqueue(RESUME_AGENT, [parent.id, parent.root], parent.task_kwargs())


async def resume_each(journal: Journal, enqueue: Enqueue, run_ids: list[str]) -> None:
    """Resume each run, together: a Redis broker's sender pushes resumes sent at once in one
    ``LPUSH`` (``fast_send``)."""
    await asyncio.gather(*(enqueue_resume(journal, enqueue, rid) for rid in run_ids))

