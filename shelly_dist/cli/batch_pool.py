"""Batch items as root runs on a worker pool: one run per item, named after the item, cancelled
with the batch.

The item id is the run's idempotency key. An item's run id is derived from the batch's identity
and the item id (:func:`item_run_id`), so a rerun of an interrupted batch finds the run it
already submitted instead of submitting a second one:

- no run recorded (never submitted, or expired): it is submitted;
- still ``queued``: it is sent again (the first send may have died with the process that made it;
  a duplicate delivery is harmless) and awaited;
- ``running`` or ``waiting``: it is awaited;
- ``done`` or ``failed``: its record is the item's result (nothing runs again);
- ``canceled`` (a Ctrl-C on the batch, or ``shelly cancel``): the item never produced a result,
  so it runs again as the next attempt, ``<id>-2``, ``<id>-3``, …

Ctrl-C cancels the tree of every run this batch was waiting for (:meth:`PoolItems.cancel_all`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from shelly_dist.cancellation import raise_if_cancelled
from shelly_dist.chats import Message
from shelly_dist.engine.sessions import new_session_id
from shelly_dist.errors import RunError, RunNotFound
from shelly_dist.redisio.blocking import read_through

if TYPE_CHECKING:  # the pool's modules import Celery: only when a batch runs on it
    from shelly_dist.runtime.celery.journal import RunRecord


class ItemFailed(RunError):
    """An item's run failed or was canceled while the batch waited: its error, and what its tree
    spent anyway (``usage``, for the output line)."""

    def __init__(self, message: str, *, run_id: str, usage: dict[str, Any]) -> None:
        super().__init__(message, run_id=run_id)
        self.usage = usage


class PoolRuntime(Protocol):
    """What a batch needs of the distributed runtime."""

    async def check(self) -> None: ...

    async def submit(self, agent: str, task: list[Message], *, session: str, run_id: str | None = None,
                     batch: str = "") -> str: ...

    async def record(self, run_id: str) -> RunRecord | None: ...

    async def wait(self, run_id: str) -> RunRecord: ...

    async def cancel(self, run_id: str) -> list[str]: ...

    async def provider_batches(self, session: str) -> None: ...


logger = logging.getLogger(__name__)

VANISHED_RESUBMITS = 3
"""Times an item whose run vanished from Redis while waited for is submitted again."""

START_OUTAGE = 300.0
"""Seconds an item's lookup and submission wait out a Redis that does not answer (or is still
loading its data after a restart) before the item is given up as not run."""

STARTING = 16
"""Items looked up and submitted at once (each a record read, a transaction and a send, a few
milliseconds): a batch of ``--concurrency 10000`` starts its items through the process's small
connection pool at that pace, instead of 10,000 commands queueing for a connection until the pool
gives up on some ("No connection available") and they wait out a pretend outage."""


def batch_identity(output: Path) -> str:
    """The default identity of a batch: its output file (the batch's journal), by absolute path."""
    return hashlib.sha1(str(output.resolve()).encode()).hexdigest()[:12]


def item_run_id(batch: str, item_id: str, attempt: int = 1) -> str:
    """The root run id of ``item_id``'s ``attempt`` in ``batch`` (item ids may hold any text)."""
    digest = hashlib.sha1(f"{batch}\0{item_id}".encode()).hexdigest()[:16]
    return f"b{digest}" if attempt == 1 else f"b{digest}-{attempt}"


class PoolItems:
    """Runs items on the pool for one batch, remembering the runs it waits for."""

    def __init__(self, runtime: PoolRuntime, batch: str, *, provider_batch: bool = False) -> None:
        self.runtime = runtime
        self.batch = batch
        self.provider_batch = provider_batch
        """Each item's model calls go through its providers' batch APIs (``--provider-batch``)."""
        self.waiting: set[str] = set()
        """Runs submitted or adopted by this batch that have not ended (what Ctrl-C cancels)."""
        self._starting = asyncio.Semaphore(STARTING)
        self.submitting: set[asyncio.Task[str]] = set()
        """Submissions under way: shielded from Ctrl-C, finished before :meth:`cancel_all` cancels."""

    async def current(self, item_id: str) -> tuple[str, RunRecord | None]:
        """The item's run id to use now and its record (``None`` when none): the first attempt
        not canceled."""
        from shelly_dist.runtime.celery.journal import RunStatus

        attempt = 1
        while True:
            run_id = item_run_id(self.batch, item_id, attempt)
            record = await self.runtime.record(run_id)
            if record is None or record.status != RunStatus.CANCELED:
                return run_id, record
            attempt += 1

    async def run(self, agent: str, item_id: str, messages: list[Message]) -> dict[str, Any]:
        """Submit (or adopt) the item's run and wait for its end; the output fields of a success.

        A run whose record vanished while it was waited for (Redis restarted without persistence:
        the record, its journal and its queued task are gone) is submitted again, up to
        :data:`VANISHED_RESUBMITS` times, instead of the item being written as an error a rerun
        would skip. Raises :class:`ItemFailed` for a run that failed or was canceled while this
        batch waited."""
        from shelly_dist.runtime.celery.journal import RunStatus

        for resubmit in range(VANISHED_RESUBMITS + 1):
            # Looking the item up and submitting it is safe to repeat (the run id is the key), so a
            # Redis outage here — down, or loading its data back after a restart — is waited out
            # like the wait's, instead of giving the item up (issue 41: a restart mid-batch).
            run_id = await read_through(
                "batch", lambda: self._started(agent, item_id, messages),
                until=time.monotonic() + START_OUTAGE)
            try:
                ended = await self.runtime.wait(run_id)
                break
            except RunNotFound:
                if resubmit == VANISHED_RESUBMITS:
                    raise
                logger.warning("batch: item %r: its run %s is gone from Redis (restarted without persistence?); "
                               "submitting it again", item_id, run_id)
        self.waiting.discard(run_id)  # kept on cancellation: cancel_all stops it
        usage = ended.tree_spent().model_dump()
        if ended.status != RunStatus.DONE:
            raise ItemFailed(ended.error or f"run {run_id} {ended.status}", run_id=run_id, usage=usage)
        return {"status": "completed", "reply": ended.reply, "run": run_id, "usage": usage}

    async def _started(self, agent: str, item_id: str, messages: list[Message]) -> str:
        """The item's run id, submitted unless it is already recorded and past ``queued``."""
        from shelly_dist.runtime.celery.journal import RunStatus

        async with self._starting:  # a few at a time: 10,000 at once only queue for connections
            run_id, record = await self.current(item_id)
            raise_if_cancelled()  # a Ctrl-C its record read swallowed (redis-py on 3.11) submits nothing
            self.waiting.add(run_id)
            if record is None or record.status == RunStatus.QUEUED:
                # A submit cut by Ctrl-C between creating the root and sending it (or with its create
                # still in flight on a dropped connection) would leave a queued root that the cancel
                # does not see and the reaper later runs: it is finished first, then cancelled.
                submit = asyncio.ensure_future(self._submit(agent, messages, run_id))
                self.submitting.add(submit)
                submit.add_done_callback(self.submitting.discard)
                await asyncio.shield(submit)
        return run_id

    async def _submit(self, agent: str, messages: list[Message], run_id: str) -> str:
        session = new_session_id()
        if self.provider_batch:  # flagged before the run exists: its first model call reads it
            await self.runtime.provider_batches(session)
        return await self.runtime.submit(agent, messages, session=session, run_id=run_id, batch=self.batch)

    async def cancel_all(self) -> None:
        """Cancel the tree of every run still waited for (the batch was interrupted), once every
        submission under way has ended (a run must be recorded for its cancel to hold).

        The runs no worker has started are cancelled first, the started ones after: cancelling a
        started run frees its worker slot, and a slot freed while a queued run's cancel was still
        on its way would start that run and ask its model after the Ctrl-C."""
        from shelly_dist.runtime.celery.journal import RunStatus

        if self.submitting:
            await asyncio.gather(*self.submitting, return_exceptions=True)
        runs, self.waiting = sorted(self.waiting), set()
        records = await asyncio.gather(*(self.runtime.record(r) for r in runs))
        started = {r for r, record in zip(runs, records, strict=True)
                   if record is not None and record.status != RunStatus.QUEUED}
        await asyncio.gather(*(self._cancel(r) for r in runs if r not in started))
        await asyncio.gather(*(self._cancel(r) for r in runs if r in started))

    async def _cancel(self, run_id: str) -> None:
        try:
            await self.runtime.cancel(run_id)
        except RunError:  # never recorded (interrupted before its creation): nothing runs
            pass
