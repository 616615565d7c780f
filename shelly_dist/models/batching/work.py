"""What Shelly's batch collector does, written once for both runtimes: one look at a provider key's
desk by the one who works it — in one process the embedded collector, on a pool the desk's elected
holder.

A look does what is due:

1. **send** — the window, once its oldest request has waited ``collect_window`` or it holds
   ``max_batch_size``, becomes a flush (journaled before anything is sent); its lines are uploaded
   where the vendor wants a file (OpenAI; the file id journaled), the create is journaled as *sent*
   before it is sent, and its batch id journaled when it comes. A flush found *creating* (its
   worker died, or the create went unanswered) is re-attached once no create sent then can still be
   in flight (:data:`CREATE_GRACE`): the vendor's batches are searched for it (``BatchAPI.find``)
   and it is created only when none is found — a request is sent in at most one batch;
2. **poll** — each flush due is polled (every ``poll_interval``); once it has ended its results are
   read, each reply priced and journaled, then delivered;
3. **fall back** — a request whose batch could not be sent (a vendor's refusal of the upload or the
   create), failed :data:`POLL_TRIES` polls in a row (one failed poll is polled again, unlike
   Shelly: its requests would otherwise be paid twice), passed its ``timeout``, or ended without a
   usable line (``errored``, ``expired``, ``canceled``, missing) is called directly through the
   provider's whole direct stack (retries, rate limits), as its run, and that reply — or the
   direct call's failure — delivered the same way; a batch abandoned after its create is
   cancelled with the vendor first. Each with a ``batch_fallback`` event naming the reason;
4. **cancel** — a flush whose every request was canceled is cancelled with the vendor.

Shelly's four events (``batch_submitted``, ``batch_polling``, ``batch_completed``,
``batch_fallback``; Shelly declares them and never emits them) go to each waiting run.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

from shelly_dist import events
from shelly_dist.chats import Chat, Message
from shelly_dist.errors import ModelError, ModelHTTPError
from shelly_dist.identity import acting_as
from shelly_dist.models.batching.api import BATCH_KEY, MISSING, SUCCEEDED, Outcome, Poll
from shelly_dist.models.batching.desk import DeskStore, Flush, Outlet, ProviderDesk, Request, StateChange
from shelly_dist.models.suspend import failed_reply
from shelly_dist.observability import metrics

logger = logging.getLogger(__name__)

POLL_TRIES = 3
"""Failed polls in a row after which a batch is given up (cancelled) and its calls made directly."""

CREATE_TIMEOUT = 20.0
"""Seconds to wait for the answer to a batch's create (its request's timeout)."""

CREATE_GRACE = CREATE_TIMEOUT + 10.0
"""Seconds after a create was sent when it can no longer be in flight: a flush found *creating* is
re-attached (or created) only after this."""

SUBMIT_ERROR = "submit_error"
POLL_ERROR = "poll_error"
TIMEOUT = "timeout"
"""``batch_fallback`` reasons for a whole batch (Shelly's, plus ``timeout``); a single request's
reason is its outcome state (``errored``, ``expired``, ``canceled``, ``missing``) or the batch's
status when it ended without results (``failed``…)."""


def batch_reply(outcome: Outcome, vendor: str, batch_id: str, custom_id: str) -> Message:
    """The reply of a succeeded request, its usage attached and marked as a batch's (:data:`BATCH_KEY`)."""
    assert outcome.reply is not None
    reply = outcome.usage.attach(outcome.reply)
    reply.metadata[BATCH_KEY] = {"vendor": vendor, "batch_id": batch_id, "custom_id": custom_id}
    return reply


class Lost(Exception):
    """The desk is no longer this worker's to work (its lock was taken over): stop at once."""


class BatchWork:
    """One look at one desk (see the module). ``save`` failing with :class:`Lost` ends it."""

    def __init__(self, provider: ProviderDesk, desk: DeskStore, outlet: Outlet) -> None:
        self.provider = provider
        self.api = provider.api
        self.settings = provider.settings
        self.desk = desk
        self.outlet = outlet

    async def run(self) -> None:
        flushes = await self.desk.flushes()
        # The flushes due within half a poll interval are polled now too: after one look they are all
        # due together, so a desk with many batches is looked at once per interval, not once each.
        for fid in await self.desk.due_flushes(time.time() + self.settings.poll_interval / 2):
            if fid in flushes:
                await self._advance(fid, flushes[fid])
        while True:  # the window, in batches of max_batch_size, as long as it is due
            n, first = await self.desk.window()
            if not n or first is None:
                return
            if n < self.settings.max_batch_size and time.time() < first.joined + self.settings.collect_window:
                return
            fid = uuid.uuid4().hex[:16]
            if not await self.desk.open(fid, self.settings.max_batch_size):
                return
            flushes = await self.desk.flushes()
            if fid in flushes:
                await self._advance(fid, flushes[fid])

    async def next_due(self) -> float | None:
        """When this desk has something due next (``None``: nothing pending)."""
        due = await self.desk.next_poll()
        n, first = await self.desk.window()
        if n and first is not None:
            window = time.time() if n >= self.settings.max_batch_size else first.joined + self.settings.collect_window
            due = window if due is None else min(due, window)
        return due

    # -- one flush ------------------------------------------------------------------------------

    async def _advance(self, fid: str, flush: Flush) -> None:
        """Take flush ``fid`` one or more steps on (each journaled before the next)."""
        if flush.state == "open":
            await self._send(fid, flush)
        elif flush.state in ("uploaded", "creating"):
            await self._create(fid, flush)
        elif flush.state == "polling":
            await self._poll(fid, flush)
        elif flush.state == "ended":
            await self._deliver(fid, flush)

    async def _calls(self, cids: list[str]) -> list[tuple[str, Request]]:
        return [(cid, who) for cid, (who, _, _) in zip(cids, await self.desk.requests(cids), strict=True)
                if who is not None]

    async def _emit(self, cids: list[str], kind: str, **data: object) -> None:
        base: dict[str, object] = {"provider": self.api.provider, "vendor": self.api.vendor, **data}
        await self.outlet.emit(await self._calls(cids), kind, base)

    async def _lines(self, flush: Flush) -> list[dict[str, Any]]:
        asked = await self.desk.asked(flush.cids)
        return [self.api.encode(cid, *found) for cid, found in zip(flush.cids, asked, strict=True)
                if found is not None]

    async def _send(self, fid: str, flush: Flush) -> None:
        await self._emit(flush.cids, events.BATCH_SUBMITTED, count=len(flush.cids))
        try:
            lines = await self._lines(flush)
            flush.file = await self.api.upload(lines)
        except ModelError as exc:
            await self._fall_back(fid, flush, flush.cids, SUBMIT_ERROR, str(exc))
            return
        flush.state = "uploaded"
        await self.desk.save(fid, flush, time.time())
        await self._create(fid, flush, lines)

    async def _create(self, fid: str, flush: Flush, lines: list[dict[str, Any]] | None = None) -> None:
        now = time.time()
        if lines is None:
            lines = await self._lines(flush)
        if flush.state == "creating":  # sent by a worker that died, or unanswered: find it first
            if now < flush.creating + CREATE_GRACE:
                await self.desk.save(fid, flush, flush.creating + CREATE_GRACE)
                return
            try:
                found = await self.api.find(flush.file, lines, flush.creating - 5)
            except ModelError as exc:
                logger.warning("provider %s: looking for batch of flush %s: %s", self.api.provider, fid, exc)
                await self.desk.save(fid, flush, now + self.settings.poll_interval)
                return
            if found is not None:
                await self._created(fid, flush, found)
                return
        flush.state, flush.creating = "creating", now
        await self.desk.save(fid, flush, now + CREATE_GRACE)  # journaled before it is sent
        try:
            batch = await self.api.create(lines, flush.file)
        except ModelHTTPError as exc:
            if exc.status_code:  # the vendor answered: nothing was created
                await self._fall_back(fid, flush, flush.cids, SUBMIT_ERROR, str(exc))
            else:  # no answer: it may have been created, and is looked for after CREATE_GRACE
                logger.warning("provider %s: create of flush %s unanswered: %s", self.api.provider, fid, exc)
            return
        except ModelError as exc:
            await self._fall_back(fid, flush, flush.cids, SUBMIT_ERROR, str(exc))
            return
        await self._created(fid, flush, batch)

    async def _created(self, fid: str, flush: Flush, batch: str) -> None:
        flush.state, flush.batch, flush.created = "polling", batch, time.time()
        await self.desk.save(fid, flush, time.time() + self.settings.poll_interval)
        n = len(flush.cids)
        logger.info("provider %s: %s batch %s created with %d requests", self.api.provider, self.api.vendor, batch, n)
        await self._emit(flush.cids, events.BATCH_POLLING, batch_id=batch, count=n)
        await self.outlet.waiting(await self._calls(flush.cids), f"{self.api.vendor} batch {batch} ({n} requests)")

    async def _poll(self, fid: str, flush: Flush) -> None:
        now = time.time()
        if await self.desk.canceled(fid) >= len(flush.cids):  # everyone waiting on it is gone
            await self._cancel(flush)
            await self.desk.save(fid, None, states=[(c, "forget", "") for c in flush.cids])
            return
        try:
            poll = await self.api.poll(flush.batch)
        except ModelError as exc:
            flush.fails += 1
            if flush.fails >= POLL_TRIES:
                await self._cancel(flush)
                await self._fall_back(fid, flush, flush.cids, POLL_ERROR, str(exc))
            else:
                await self.desk.save(fid, flush, now + self.settings.poll_interval)
            return
        flush.fails, flush.status = 0, poll.status
        if poll.ended:
            await self._results(fid, flush, poll)
        elif now >= flush.created + self.settings.timeout:
            await self._cancel(flush)
            await self._fall_back(fid, flush, flush.cids, TIMEOUT, f"no results after {self.settings.timeout:g}s")
        else:
            await self.desk.save(fid, flush, now + self.settings.poll_interval)

    async def _results(self, fid: str, flush: Flush, poll: Poll) -> None:
        try:
            results = await self.api.results(flush.batch, poll)
        except ModelError as exc:
            await self._fall_back(fid, flush, flush.cids, POLL_ERROR, str(exc))
            return
        await self._emit(flush.cids, events.BATCH_COMPLETED, batch_id=flush.batch, count=len(results),
                         status=poll.status)
        states: list[StateChange] = []
        failed = []
        for cid in flush.cids:
            outcome = results.get(cid) or Outcome(MISSING, error=poll.error)
            if outcome.state == SUCCEEDED and outcome.reply is not None:
                if self.api.usage is not None:
                    self.api.usage.add(outcome.usage)
                reply = self.provider.price(batch_reply(outcome, self.api.vendor, flush.batch, cid))
                states.append((cid, "reply", reply.model_dump_json()))
            else:
                reason = outcome.state if outcome.state != MISSING or not poll.error else poll.status
                failed.append((cid, reason, outcome.error))
        flush.state = "ended"
        await self.desk.save(fid, flush, time.time(), states)
        for cid, reason, error in failed:
            await self._fall_back(fid, flush, [cid], reason, error)
        await self._deliver(fid, flush)

    async def _cancel(self, flush: Flush) -> None:
        """Cancel a batch nobody will read (best effort: a failure is logged, not raised)."""
        try:
            await self.api.cancel(flush.batch)
        except ModelError as exc:
            logger.warning("provider %s: cancelling batch %s failed: %s", self.api.provider, flush.batch, exc)

    # -- delivery and fallback ------------------------------------------------------------------

    async def _fall_back(self, fid: str, flush: Flush, cids: list[str], reason: str, error: str) -> None:
        """Journal ``cids`` as to be called directly and say so; :meth:`_deliver` makes the calls."""
        live = [cid for cid, (_, state, _) in zip(cids, await self.desk.requests(cids), strict=True)
                if state not in ("done", "canceled")]
        if live:
            logger.warning("provider %s: %d call(s) go direct (%s): %s", self.api.provider, len(live), reason, error)
        flush.state = "ended"
        await self.desk.save(fid, flush, time.time(), [(c, f"fallback:{reason}", "") for c in live])
        data: dict[str, object] = {"reason": reason, "error": error, "count": len(cids)}
        if flush.batch:
            data["batch_id"] = flush.batch
        await self._emit(live, events.BATCH_FALLBACK, **data)
        metrics.BATCH_FALLBACKS.labels(self.api.provider, reason).inc(len(live))

    async def _deliver(self, fid: str, flush: Flush) -> None:
        """Make the direct calls of the flush's requests that fell back, deliver every reply not
        delivered yet, and forget the flush once every request is done."""
        pending = await self._pending(flush)
        direct = [(cid, who) for cid, who, state, _ in pending if state.startswith("fallback:")]
        if direct:
            await asyncio.gather(*(self._call_directly(fid, flush, cid, who) for cid, who in direct))
            pending = await self._pending(flush)
        later = False
        for cid, who, state, reply in pending:
            if state == "reply" and reply and await self.outlet.deliver(who, cid, Message.model_validate_json(reply)):
                await self.desk.save(fid, flush, time.time(), [(cid, "done", "")])
            else:
                later = True
        if later:  # a run that has not journaled its wait yet: delivered at the next look
            await self.desk.save(fid, flush, time.time() + 1.0)
        else:  # every run has its reply journaled: nothing will ask for these requests again
            await self.desk.save(fid, None, states=[(cid, "forget", "") for cid in flush.cids])

    async def _pending(self, flush: Flush) -> list[tuple[str, Request, str, str]]:
        return [(cid, who, state, reply) for cid, (who, state, reply)
                in zip(flush.cids, await self.desk.requests(flush.cids), strict=True)
                if who is not None and state not in ("done", "canceled")]

    async def _call_directly(self, fid: str, flush: Flush, cid: str, who: Request) -> None:
        [asked] = await self.desk.asked([cid])
        if asked is None:
            await self.desk.save(fid, flush, time.time(), [(cid, "done", "")])
            return
        messages, tools = asked
        try:
            with acting_as(who.agent, run=who.run, session=who.session):
                reply = self.provider.price(await self.provider.direct.complete(Chat(messages), tools))
        except ModelError as exc:  # the direct call failed too: the run fails with its error
            reply = failed_reply(exc)
        await self.desk.save(fid, flush, time.time(), [(cid, "reply", reply.model_dump_json())])
