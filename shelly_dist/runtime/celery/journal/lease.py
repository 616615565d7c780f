"""The right to advance one run: a typed lease whose methods are the only writers of the run.

DESIGN §3 rule 3: the journal, not the broker, decides who advances a run. A claim returns a
:class:`Lease` (the parsed record, the holder's token, the deadline); checkpoint, expect, release
and finish are its methods, and each is fenced inside its Lua script by the token, so fencing
cannot be forgotten. While a step is in flight :meth:`Lease.heartbeat` has the process's renewer
(:mod:`.renewer`, a thread of its own, so a busy or blocked event loop cannot delay it) renew the
lease every quarter of its length; a renewal that is refused (someone else holds the run now) or
that cannot reach Redis before the lease lapses marks the lease lost and cancels the step, which
then writes nothing (every write would be refused anyway) and is abandoned.

A coordinator's root run has no lease key: the coordinator process is its only writer, and its
token is stored as the record's ``owner`` (see :meth:`~.runs.Journal.open_root`); it is never heartbeaten
and never reaped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from shelly_dist.agent import ChildRequest, RunState
from shelly_dist.agent.children import Ending, child_run_id
from shelly_dist.chats import Message
from shelly_dist.runtime.celery.journal import blobs
from shelly_dist.runtime.celery.journal.record import RunEnd, RunRecord, RunStatus, child_key
from shelly_dist.runtime.celery.journal.renewer import renew_request
from shelly_dist.runtime.celery.journal.store import LeaseLost, RunStore

__all__ = ["Held", "Lease", "LeaseLost"]


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


@dataclass
class Held:
    """A checkpoint serialized but not written yet: the run's last one, held back by
    :meth:`Lease.hold` so it rides with the finish (one round trip for the run's end, not two)."""

    offset: int
    state: str
    """The :class:`RunState` JSON without its messages."""
    messages: list[str]
    blobs: dict[str, str] = field(default_factory=dict)
    """The attachments' bytes the messages reference, by digest (:mod:`.blobs`): written first."""

    @classmethod
    def of(cls, offset: int, state: RunState, new: list[Message]) -> Held:
        journaled, stashed = blobs.stash(new)
        return cls(offset, state.model_dump_json(exclude={"messages"}), [m.model_dump_json() for m in journaled],
                   stashed)


@dataclass
class Lease:
    """The right to write one run, held by ``token`` until ``deadline``; its methods are the only
    writers of the run, each one fenced script (:mod:`.scripts`) over the :class:`~.store.RunStore`."""

    store: RunStore
    record: RunRecord
    token: str
    deadline: float = 0.0
    """Wall-clock time (``time.time()``) at which the lease lapses unless renewed; 0 for an owner."""
    lost: bool = False
    held: Held | None = None
    """The last checkpoint, held back to be written by :meth:`finish` (see :meth:`hold`)."""

    @property
    def run_id(self) -> str:
        return self.record.id

    # -- writes (each fenced by ``token`` in its script) ----------------------------------------

    async def checkpoint(
        self, offset: int, state: RunState, new: list[Message], status: RunStatus, events: str = "", *,
        rewrite: bool = False,
    ) -> tuple[int, bool]:
        """Append ``new`` after ``offset`` journaled messages, store ``state`` and write the
        ``events`` batch, in one round trip; returns (journaled count, tree canceled). The run's
        ``stop`` reason (fail-fast) and its steering count come back in the same answer, into
        :attr:`record`.

        ``rewrite``: the chat was rewritten in place (an effect compacted or trimmed it), so
        ``new`` is the whole chat and replaces the journaled messages, in the same atomic step
        (still refused unless the journal holds exactly ``offset`` messages)."""
        return await self._write(Held.of(offset, state, new), status, events, rewrite)

    def hold(self, offset: int, state: RunState, new: list[Message]) -> None:
        """Keep the run's last checkpoint (``new`` after ``offset``, ``state`` as it is now) for
        :meth:`finish` to write first, atomically, in its own round trip. Only for a step whose
        redo is harmless — a crash before the finish loses the held write, so the run continues
        from its previous checkpoint, as after a crash in the step itself. :meth:`write_held`
        writes it on its own when the run does not finish after all."""
        self.held = Held.of(offset, state, new)

    async def write_held(self, events: str = "") -> None:
        """Write the held checkpoint now (a run that ends some other way than :meth:`finish`)."""
        held, self.held = self.held, None
        if held is not None:
            await self._write(held, RunStatus.RUNNING, events)

    async def _write(self, held: Held, status: RunStatus, events: str, rewrite: bool = False) -> tuple[int, bool]:
        st, r = self.store, self.record
        args: list[Any] = [self.token, held.offset, held.state, str(status),
                           st.settings.retention, str(time.time()), events, "1" if rewrite else "0"]
        args += held.messages
        keys = [st.keys.run(r.id), st.keys.run_msgs(r.id), st.keys.run(r.root), st.keys.run_lease(r.id),
                *st.stream_keys(r.session)]
        await blobs.put(st.client, st.keys, held.blobs, st.settings.retention)
        count, canceled, r.stop, steer = await st.run_script(st.scripts.checkpoint, keys, args)
        r.steer = int(steer)
        await st.append_events(r.session, events)
        return int(count), canceled == "1"

    async def expect(
        self, requests: list[ChildRequest], iteration: int, fingerprint: str
    ) -> tuple[list[str], list[str]]:
        """Register the children before enqueueing; returns (all child ids, ids not started yet)."""
        st, parent = self.store, self.record
        now = time.time()
        ids: list[str] = []
        children: list[dict[str, Any]] = []
        for r in requests:
            cid = child_run_id(parent.id, r, iteration)
            ids.append(cid)
            fields = RunRecord.new(
                cid, agent=r.agent, depth=r.depth, parent=parent.id, parent_key=child_key(r, iteration),
                root=parent.root, session=parent.session, request=r, fingerprint=fingerprint, task=r.task,
                now=now,
            ).fields()
            children.append({"key": child_key(r, iteration), "id": cid, "fields": fields})
        argv: list[Any] = [self.token, st.settings.retention, json.dumps(children),
                           _ms(now + st.settings.requeue_after)]
        keys = [st.keys.run(parent.id), st.keys.run_lease(parent.id), st.keys.run_expected(parent.id),
                st.keys.tree_runs(parent.root), st.keys.tree_deadlines(parent.root)]
        keys += [st.keys.run(cid) for cid in ids]
        to_start = await st.run_script(st.scripts.expect, keys, argv, hint=(parent.root, argv[3]))
        return ids, list(to_start)

    async def release(self) -> int:
        """Let a suspended run go; returns the children still pending (0: keep going now)."""
        st, r = self.store, self.record
        keys = [st.keys.run(r.id), st.keys.run_lease(r.id), st.keys.tree_deadlines(r.root)]
        return int(await st.run_script(st.scripts.release, keys, [self.token, r.id]))

    async def finish(
        self, ending: Ending, result: dict[str, Any], *, events: str = "", end: RunEnd = RunEnd()
    ) -> tuple[int, str]:
        """End the run as ``ending`` (writing its last ``events``) and join its result into its parent; returns
        (children left, parent mode). ``left == 0``: this call completed the join and the caller
        enqueues the parent's resume. Finishing a run already terminal is a no-op (``-1``). A
        checkpoint :meth:`hold` kept is written first, in the same atomic step; ``end``: what else the
        end writes (usage, instance, reply, error)."""
        st, r = self.store, self.record
        parent = r.parent or r.id
        keys = [st.keys.run(r.id), st.keys.run_lease(r.id), st.keys.run(parent), st.keys.run_children(parent),
                st.keys.tree_deadlines(r.root), st.keys.run_msgs(r.id), *st.stream_keys(r.session)]
        now = time.time()
        held, self.held = self.held, None
        args: list[Any] = [self.token, str(RunStatus.ended(ending)), json.dumps(result), str(now),
                           st.settings.retention, r.parent_key if r.parent else "", events, r.id, r.parent,
                           _ms(now + st.settings.requeue_after)]
        also = end.to_json()
        if held is None:
            args += ["", "", 0, also]
        else:
            args += [held.offset, held.state, len(held.messages), also, *held.messages]
            await blobs.put(st.client, st.keys, held.blobs, st.settings.retention)
        # A child's finish may complete its parent's join, making the parent's resume due at
        # requeue_after from now. The tree's hint is already no later than this run's own deadline
        # (its lease's: ≤ now + lease, written by this process), which the finish removes: so the
        # resume needs a hint of its own only when it may come due before that, requeue_after <
        # lease (not on default settings; on a cluster the hint costs two round trips per child).
        hint = (r.root, args[9]) if r.parent and st.settings.requeue_after < st.settings.lease else None
        # The finish ends the lease (its script deletes it, fenced by the token): stop renewing it
        # now. A renewal between the script and the step's end would find the lease gone, call it
        # lost and cancel the step before it appends the events (a cluster's round trip after the
        # script) and enqueues the parent's resume, which would then wait for a reaper
        # (requeue_after). A finish refused for a lost lease raises LeaseLost itself.
        st.renewer.release(self)
        left, mode = await st.run_script(st.scripts.finish, keys, args, hint=hint)
        if mode == "terminal":
            return -1, ""
        await st.append_events(r.session, events)
        return int(left), str(mode)

    async def drop(self) -> None:
        """Give the run up after a failed attempt, so a retry need not wait out the lease."""
        await self.store.run_script(self.store.scripts.drop, [self.store.keys.run_lease(self.run_id)], [self.token])

    # -- keeping it -----------------------------------------------------------------------------

    async def renew(self) -> bool:
        """Extend the lease; False when someone else holds the run now."""
        keys, args = renew_request(self.store.keys, self.store.settings, [self], time.time())
        ok = bool(int((await self.store.run_script(self.store.scripts.renew, keys, args))[0]))
        if ok:
            self.deadline = time.time() + self.store.settings.lease
        return ok

    @contextlib.asynccontextmanager
    async def heartbeat(self, step: asyncio.Task[Any]) -> AsyncIterator[None]:
        """Keep the lease while the body runs (the process's :class:`~.renewer.Renewer` renews it
        from its own thread); if it is lost, it is marked and ``step`` cancelled."""
        renewer = self.store.renewer
        renewer.hold(self, step)
        try:
            yield
        finally:
            renewer.release(self)
