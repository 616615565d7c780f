"""Spawned children on the pool: Celery tasks, their outcomes kept with the parent in Redis.

The pool's :class:`~shelly_dist.agent.spawn.Spawner`. A spawned child is a run of the parent's
tree (same hash tag, so a tree cancel reaches it) whose record names the parent but no join key:
its finish joins nothing and never holds the parent's resume back. What the parent keeps, in
keys of its own run:

* ``…:spawns`` — a hash: each spawned run's :class:`Spawned` JSON by run id, ``@<id>`` once it
  was announced, ``#active`` (running children, for ``max_children``) and ``#outstanding``
  (children not detached and not announced yet, which a finishing parent waits for);
* ``…:announce`` — the announcements, in order; the parent's run drains them from the cursor
  journaled in its state, so a parent continued on any worker neither loses nor repeats one;
* ``…:spawn:<sha>`` — the dedup key (``SET NX EX``).

A child that ends announces *before* its finish (:func:`announce`, idempotent by run id), so a
worker killed between the two leaves a child that is claimed again, ends again and announces
nothing twice. A parent on a worker that would finish while children are outstanding suspends
(:func:`suspend`): ``pending`` goes up by one with a ``spawn_wait`` mark, the lease goes, and the
next announcement takes the mark back and makes the parent's resume due (the caller enqueues it;
the reaper does if that caller dies). A parent driven by a coordinator waits on its run channel.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from shelly_dist import events
from shelly_dist.agent import children
from shelly_dist.agent.records import ChildRequest, DelegateEntry
from shelly_dist.agent.spawn import DEDUP_WINDOW, SpawnAck, Spawned, limit_error, state_of
from shelly_dist.agent.stops import TASK_CANCELED
from shelly_dist.errors import RunCancelled
from shelly_dist.redisio.blocking import read_through
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.runtime.celery.children.stops import stop_runs
from shelly_dist.runtime.celery.journal import Journal, Lease, RunRecord, RunStatus
from shelly_dist.runtime.celery.names import RUN_AGENT, task_kwargs

if TYPE_CHECKING:
    from shelly_dist.agent.run import Run
    from shelly_dist.redisio.hub import Watch

ACTIVE, OUTSTANDING = "#active", "#outstanding"
CLOCK_SLACK = 0.05
"""Seconds by which a step timer cut at the deadline may read the wall clock early."""




Send = Callable[[str, list[Any], dict[str, Any]], Awaitable[Any]]


def is_spawned(record: RunRecord) -> bool:
    """A spawned run names its parent but joins under no key (a delegated child has one)."""
    return bool(record.parent) and not record.parent_key


def _spawns(journal: Journal, pid: str) -> str:
    return f"{journal.keys.run(pid)}:spawns"


def _announce_key(journal: Journal, pid: str) -> str:
    return f"{journal.keys.run(pid)}:announce"


class PoolSpawner:
    """The spawns of one leased run (a worker's step, or a coordinator's root)."""

    def __init__(self, journal: Journal, send: Send, lease: Lease, fingerprint: str,
                 watch: Callable[[], Awaitable[Watch]] | None = None,
                 shown: Callable[[list[str]], Awaitable[None]] | None = None) -> None:
        self.journal = journal
        self.send = send
        self.lease = lease
        self.fingerprint = fingerprint
        self.watch = watch
        """The parent's run channel (a coordinator's root waits on it; a worker suspends instead)."""
        self.shown = shown
        """Awaited with the run ids of fresh announcements before the parent hears them: a
        coordinator's live view shows those children's ends first (the causal order)."""

    async def start(self, parent: Run, request: ChildRequest, spawned: Spawned, dedup: str) -> SpawnAck:
        journal, record, now = self.journal, self.lease.record, time.time()
        settings = journal.settings
        pid, cid = record.id, spawned.run_id
        spawned.state = "queued"
        if limit := parent.agent.options.spawn_timeout:
            request.spawn_timeout, request.spawn_deadline = limit, now + limit
        fields = RunRecord.new(
            cid, agent=request.agent, depth=request.depth, parent=pid, spawned=True, root=record.root,
            session=record.session, request=request, fingerprint=self.fingerprint, task=request.task, now=now,
        ).fields()
        digest = hashlib.sha256(dedup.encode()).hexdigest()[:16]
        keys = [_spawns(journal, pid), f"{journal.keys.run(pid)}:spawn:{digest}", journal.keys.run(cid),
                journal.keys.tree_runs(record.root), journal.keys.tree_deadlines(record.root)]
        args = [cid, spawned.model_dump_json(), parent.agent.options.max_children, DEDUP_WINDOW, json.dumps(fields),
                int((now + settings.requeue_after) * 1000), settings.retention, "1" if spawned.detach else "0"]
        with redis_errors("spawn"):
            outcome, detail = await journal.store.run_script(
                journal.store.scripts.spawn_start, keys, args,
                hint=(record.root, int((now + settings.requeue_after) * 1000)))
        if outcome == "full":
            return SpawnAck("", "rejected", limit_error(parent.agent.options.max_children, int(detail)) or "")
        if outcome == "dup":
            return SpawnAck(str(detail), "accepted")
        await self.send(RUN_AGENT, [cid, record.root],
                        task_kwargs(request.agent, request.depth, record.session, request.task))
        parent.emit(events.RUN_SPAWNED, child_run=cid, child_agent=request.agent, detach=spawned.detach,
                    task=request.task[: children.TASK_LIMIT])
        return SpawnAck(cid, "accepted")

    async def spawned(self, parent_id: str) -> list[Spawned]:
        """The parent's spawned runs; one not ended yet shows its record's state (queued until a
        worker claims it, then running)."""
        runs = await spawned_runs(self.journal, parent_id)
        going = [s for s in runs if not s.ended]
        if going:
            with redis_errors("spawn"):
                async with self.journal.client.pipeline(transaction=False) as pipe:
                    for s in going:
                        pipe.hget(self.journal.keys.run(s.run_id), "status")
                    statuses = await pipe.execute()
            for s, status in zip(going, statuses, strict=True):
                s.state = "queued" if status in (None, RunStatus.QUEUED) else "running"
        return runs

    async def cancel(self, parent_id: str, run_id: str) -> bool:
        runs = {s.run_id: s for s in await self.spawned(parent_id)}
        if run_id not in runs or runs[run_id].ended:
            return False
        await stop_runs(self.journal.client, self.journal.keys, [run_id], TASK_CANCELED)
        return True

    async def announcements(self, parent_id: str, start: int) -> list[Spawned]:
        with redis_errors("spawn"):
            raw = await self.journal.client.lrange(_announce_key(self.journal, parent_id), start, -1)
        fresh = [Spawned.model_validate_json(r) for r in raw]
        if fresh and self.shown is not None:
            await self.shown([s.run_id for s in fresh])
        return fresh

    async def wait(self, parent: Run) -> bool:
        """A coordinator's root: wait on its run channel until an announcement is due or none will
        come (subscribe, read, wait for a message or the poll interval, read again)."""
        if self.watch is None:
            return False
        wakeups = await self.watch()
        journal, pid, root = self.journal, parent.state.run_id, self.lease.record.root
        while True:
            seen = wakeups.generation
            queued, outstanding, canceled = await read_through("spawn", lambda: _progress(journal, pid, root))
            if queued > parent.state.announced:
                return True
            if outstanding <= 0:
                return False
            if canceled:
                raise RunCancelled(f"run {pid}: canceled", run_id=pid)
            await wakeups.moved(seen)


    async def settle(self) -> None:
        """The root's reply is in: wait until every run it spawned has ended (detached ones too),
        since ``shelly run`` exits only once its tree is done."""
        if self.watch is None:
            return
        wakeups = await self.watch()
        journal, pid = self.journal, self.lease.record.id
        while True:
            seen = wakeups.generation
            active = await read_through("spawn", lambda: _active(journal, pid))
            if active <= 0:
                return
            await wakeups.moved(seen)


async def _active(journal: Journal, pid: str) -> int:
    with redis_errors("spawn"):
        return int(await journal.client.hget(_spawns(journal, pid), ACTIVE) or 0)


async def _progress(journal: Journal, pid: str, root: str) -> tuple[int, int, bool]:
    with redis_errors("spawn"):
        async with journal.client.pipeline(transaction=False) as pipe:
            pipe.llen(_announce_key(journal, pid))
            pipe.hget(_spawns(journal, pid), OUTSTANDING)
            pipe.hget(journal.keys.run(root), "canceled")
            queued, outstanding, canceled = await pipe.execute()
    return int(queued), int(outstanding or 0), canceled == "1"


async def spawned_runs(journal: Journal, parent_id: str) -> list[Spawned]:
    """The runs ``parent_id`` spawned, in the order they were started."""
    with redis_errors("spawn"):
        raw = await journal.client.hgetall(_spawns(journal, parent_id))
    runs = [Spawned.model_validate_json(v) for k, v in raw.items() if not k.startswith(("#", "@"))]
    return sorted(runs, key=lambda s: s.started)


async def announce(journal: Journal, record: RunRecord, status: str, entry: DelegateEntry, iterations: int) -> bool:
    """Announce spawned run ``record``'s end to its parent (once, however often it ends); True
    when this made the parent's resume due (the caller enqueues it). Its own spawned runs still
    going are stopped with it when it was cancelled."""
    pid = record.parent
    with redis_errors("spawn"):
        raw = await journal.client.hget(_spawns(journal, pid), record.id)
    if raw is None:  # the parent's keys expired: nobody to tell
        return False
    spawned = Spawned.model_validate_json(raw)
    ended = spawned.ended_with(entry, state_of(entry, status), iterations)
    keys = [_spawns(journal, pid), _announce_key(journal, pid), journal.keys.run(pid),
            journal.keys.tree_deadlines(record.root)]
    args = [record.id, ended.model_dump_json(), journal.settings.retention,
            int((time.time() + journal.settings.requeue_after) * 1000), pid, "1" if spawned.detach else "0"]
    with redis_errors("spawn"):
        _, due = await journal.store.run_script(journal.store.scripts.spawn_announce, keys, args,
                                                 hint=(record.root, int(args[3])))
    return due == "resume"


async def stop_spawned(journal: Journal, run_id: str) -> None:
    """Stop the runs ``run_id`` spawned that still run (it was cancelled: its subtree goes too)."""
    going = [s.run_id for s in await spawned_runs(journal, run_id) if not s.ended]
    if going:
        await stop_runs(journal.client, journal.keys, going, TASK_CANCELED)


def time_left(request: ChildRequest | None, step_limit: float) -> float:
    """How long a step of a run may take: its step limit, or less when it is a spawned child
    whose ``spawn_timeout`` runs out sooner."""
    if request is None or not request.spawn_deadline:
        return step_limit
    return max(0.0, min(step_limit, request.spawn_deadline - time.time()))


def timed_out(request: ChildRequest | None) -> str:
    """The error of a spawned child past its deadline ("" while it has time)."""
    if request is None or not request.spawn_deadline or time.time() < request.spawn_deadline - CLOCK_SLACK:
        return ""
    return f"spawn: timed out after {request.spawn_timeout:g}s"


async def suspend(journal: Journal, lease: Lease, cursor: int) -> str:
    """A worker's run that would finish: ``go`` (announcements wait: take another step),
    ``done`` (no child it waits for is left: finish) or ``wait`` (suspended, lease given back)."""
    r = lease.record
    keys = [journal.keys.run(r.id), journal.keys.run_lease(r.id), journal.keys.tree_deadlines(r.root),
            _spawns(journal, r.id), _announce_key(journal, r.id)]
    with redis_errors("spawn"):
        return str(await journal.store.run_script(journal.store.scripts.spawn_suspend, keys,
                                                  [lease.token, r.id, cursor]))
