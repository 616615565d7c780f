"""The pool's collector: each provider key's desk is worked by one elected process at a time, which
sends its window as one vendor batch, polls the batches that are due, and delivers each reply to
its waiting run — at a cost that follows what is due, not what waits (DESIGN §3 rule 17).

Every worker runs a :class:`DeskRunner`. Each tick it reads the desks due now (``Keys.batch_desks``),
takes the lock of each one it can work (its config has the provider) and nobody holds, and does
what is due there:

1. **send** — the window, once its oldest request has waited ``collect_window`` or it holds
   ``max_batch_size``, becomes a flush (journaled before anything is sent); its lines are uploaded
   (OpenAI's input file; its id journaled), the create is journaled as *sent* before it is sent, and
   its batch id journaled when it comes. A flush found *creating* after its holder died is
   re-attached: once no create sent then can still be in flight (:data:`CREATE_GRACE`), the vendor's
   batches are searched for it (``BatchAPI.find``: OpenAI's by input file) and created only when
   none is found — a request is sent in at most one batch;
2. **poll** — each flush due is polled (every ``poll_interval``); when it has ended its results are
   read, each reply priced at the batch price and journaled, then delivered
   (``model_waits.deliver``, exactly once per wait) and the run resumed on any worker;
3. **fall back** — a request whose batch could not be sent, failed three polls in a row, passed its
   ``timeout`` (the batch is cancelled first) or ended without a usable line is called directly,
   through the provider's whole direct stack (retries, rate limits), by the desk's holder, and that
   reply delivered the same way — each with a ``batch_fallback`` event;
4. **cancel** — a flush whose every request was canceled (their trees were) is cancelled with the
   vendor; a canceled request's result is dropped.

The events (Shelly's ``batch_submitted``, ``batch_polling``, ``batch_completed``,
``batch_fallback``) go to each waiting run's session stream, and a waiting run's record says what it
waits for (``waiting_for: openai batch batch_abc (37 requests)``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis

from shelly_dist import events
from shelly_dist.cancellation import pause
from shelly_dist.chats import Chat, Message
from shelly_dist.errors import ModelError, ModelHTTPError, StoreError
from shelly_dist.events import Event
from shelly_dist.identity import acting_as
from shelly_dist.models.batching import Outcome, Poll
from shelly_dist.models.batching.api import MISSING, SUCCEEDED
from shelly_dist.models.batching.collector import POLL_ERROR, POLL_TRIES, SUBMIT_ERROR, TIMEOUT, batch_reply
from shelly_dist.models.suspend import failed_reply
from shelly_dist.models.usage import Usage
from shelly_dist.observability import metrics
from shelly_dist.providers.batches.wire import CREATE_TIMEOUT
from shelly_dist.runtime.celery import model_waits
from shelly_dist.runtime.celery.batches.desk import IDLE, ORIGIN, Desk, Flush, Request, due_desks, next_due
from shelly_dist.runtime.celery.batches.layer import PROVIDER_BATCH, PoolBatching, ProviderDesk
from shelly_dist.runtime.celery.events import StreamSink
from shelly_dist.runtime.celery.registry import registered
from shelly_dist.runtime.celery.store import run_script
from shelly_dist.state.connection import redis_errors
from shelly_dist.state.keys import Keys

logger = logging.getLogger(__name__)

TICK = 0.25
"""Seconds between two looks at the due desks when none is due sooner (a window waits at most
this much past its ``collect_window``)."""

LOCK_TTL = 15.0
"""Seconds a desk's lock lasts without renewal: a dead holder's desk is taken over after this."""

CREATE_GRACE = CREATE_TIMEOUT + 10.0
"""Seconds after a create was sent when it can no longer be in flight (its request timed out): a
flush found *creating* is re-attached (or created) only after this."""

DELIVER_RETRY = 1.0
"""Seconds before a reply whose run has not journaled its wait yet is delivered again."""

DESKS_PER_TICK = 16


class _Tool:
    """A tool as the direct call sends it (name, description, schema), from the desk's payload."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.name = str(spec["name"])
        self.description = str(spec.get("description") or "")
        self.input_schema = dict(spec.get("input_schema") or {})


class DeskRunner:
    """Works the due desks of this process's providers (see the module)."""

    def __init__(self, batching: PoolBatching, *, enqueue_resume: Callable[[str], Awaitable[None]],
                 requeue_after: float, name: str = "") -> None:
        self.batching = batching
        self.client: aioredis.Redis = batching.client
        self.keys: Keys = batching.keys
        self.retention = batching.retention
        self.enqueue_resume = enqueue_resume
        self.requeue_after = requeue_after
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._task: asyncio.Task[None] | None = None
        self._working: dict[str, asyncio.Task[bool]] = {}

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="shelly-batch-desks")

    async def aclose(self) -> None:
        tasks = [t for t in (self._task, *self._working.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _loop(self) -> None:
        while True:
            wait = TICK
            try:
                if self.batching.desks:
                    await self.tick()
                    first = await next_due(self.client, self.keys)
                    if first is not None:
                        wait = min(TICK, max(0.0, first - time.time()))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away, a vendor down: the desks wait in Redis; try again
                logger.warning("provider batches: %s", exc)
                wait = 1.0
            await pause(max(wait, 0.02))

    async def tick(self) -> int:
        """Start work on every desk due now that this process knows, is not working already, and
        nobody else holds (each in a task of its own: a desk's long fallback calls do not hold up
        the others); how many were started."""
        due = [d for d in await due_desks(self.client, self.keys, time.time(), DESKS_PER_TICK)
               if d in self.batching.desks and d not in self._working]
        for d in due:
            self._working[d] = asyncio.create_task(self._hold_and_work(self.batching.desks[d]),
                                                   name=f"shelly-batch-desk {d}")
            self._working[d].add_done_callback(lambda t, d=d: self._finished(d, t))
        return len(due)

    def _finished(self, desk: str, task: asyncio.Task[bool]) -> None:
        self._working.pop(desk, None)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("provider batches: desk %s: %s", desk, task.exception())

    async def settle(self) -> None:
        """Wait for the desks being worked now (tests, shutdown)."""
        while self._working:
            await asyncio.gather(*self._working.values(), return_exceptions=True)

    async def _hold_and_work(self, provider: ProviderDesk) -> bool:
        desk = self.batching.desk(provider.id)
        token = f"{self.name}:{uuid.uuid4().hex[:6]}"
        if not await desk.lock(token, LOCK_TTL):
            return False
        renew = asyncio.create_task(self._renew(desk, token))
        try:
            await _Work(self, provider, desk, token).run()
        finally:
            renew.cancel()
            with contextlib.suppress(asyncio.CancelledError, StoreError):
                await renew
            with contextlib.suppress(StoreError):
                await desk.unlock(token)
        return True

    async def _renew(self, desk: Desk, token: str) -> None:
        while True:
            await asyncio.sleep(LOCK_TTL / 3)
            if not await desk.lock(token, LOCK_TTL):
                logger.warning("provider batches: lost the lock of desk %s", desk.id)
                return


class _Work:
    """One look at one desk by its holder."""

    def __init__(self, runner: DeskRunner, provider: ProviderDesk, desk: Desk, token: str) -> None:
        self.runner = runner
        self.provider = provider
        self.api = provider.api
        self.settings = provider.settings
        self.desk = desk
        self.token = token

    async def run(self) -> None:
        now = time.time()
        flushes = await self.desk.flushes()
        for fid in await self.desk.due_flushes(now):
            if fid in flushes:
                await self._advance(fid, flushes[fid])
        while True:  # the window, in batches of max_batch_size, as long as it is due
            n, first = await self.desk.window()
            if not n or first is None:
                break
            if n < self.settings.max_batch_size and time.time() < first.joined + self.settings.collect_window:
                break
            fid = uuid.uuid4().hex[:16]
            if not await self.desk.open(self.token, fid, self.settings.max_batch_size):
                break
            flushes = await self.desk.flushes()
            if fid in flushes:
                await self._advance(fid, flushes[fid])
        await self._schedule()

    async def _schedule(self) -> None:
        at = time.time() + IDLE
        poll = await self.desk.next_poll()
        if poll is not None:
            at = min(at, poll)
        n, first = await self.desk.window()
        if n and first is not None:
            at = min(at, first.joined + self.settings.collect_window)
        await self.desk.schedule(at, self.settings.collect_window)
        await self._gauges(n)

    async def _gauges(self, waiting: int) -> None:
        flushes = await self.desk.flushes()
        provider = self.api.provider
        metrics.BATCH_REQUESTS_WAITING.labels(provider, "window").set(waiting)
        metrics.BATCH_REQUESTS_WAITING.labels(provider, "sent").set(
            sum(len(f.cids) for f in flushes.values() if f.state == "polling"))
        steps = {"sending": ("open", "uploaded", "creating"), "polling": ("polling",), "delivering": ("ended",)}
        for status, states in steps.items():
            metrics.BATCHES.labels(provider, status).set(sum(1 for f in flushes.values() if f.state in states))

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

    async def _save(self, fid: str, flush: Flush | None, due: float | None = None,
                    states: list[tuple[str, str, str]] | None = None) -> None:
        if not await self.desk.save(self.token, fid, flush, due, states or []):
            raise StoreError(f"provider batches: desk {self.desk.id}: its lock was taken over")

    async def _lines(self, flush: Flush) -> list[dict[str, Any]]:
        payloads = await self.desk.payloads(flush.cids)
        lines = []
        for cid, payload in zip(flush.cids, payloads, strict=True):
            if payload is not None:
                messages = [Message.model_validate(m) for m in payload["messages"]]
                lines.append(self.api.encode(cid, messages, [_Tool(t) for t in payload["tools"]]))
        return lines

    async def _send(self, fid: str, flush: Flush) -> None:
        await self._emit(flush.cids, events.BATCH_SUBMITTED, count=len(flush.cids))
        try:
            lines = await self._lines(flush)
            flush.file = await self.api.upload(lines)
        except ModelError as exc:
            await self._fall_back(fid, flush, flush.cids, SUBMIT_ERROR, str(exc))
            return
        flush.state = "uploaded"
        await self._save(fid, flush, time.time())
        await self._create(fid, flush, lines)

    async def _create(self, fid: str, flush: Flush, lines: list[dict[str, Any]] | None = None) -> None:
        now = time.time()
        if lines is None:
            lines = await self._lines(flush)
        if flush.state == "creating":  # sent by a holder that died (or timed out): find it first
            if now < flush.creating + CREATE_GRACE:
                await self._save(fid, flush, flush.creating + CREATE_GRACE)
                return
            try:
                found = await self.api.find(flush.file, lines, flush.creating - 5)
            except ModelError as exc:
                logger.warning("provider batches: desk %s: looking for flush %s: %s", self.desk.id, fid, exc)
                await self._save(fid, flush, now + self.settings.poll_interval)
                return
            if found is not None:
                await self._created(fid, flush, found)
                return
        flush.state, flush.creating = "creating", now
        await self._save(fid, flush, now + CREATE_GRACE)  # journaled before it is sent
        try:
            batch = await self.api.create(lines, flush.file)
        except ModelHTTPError as exc:
            if exc.status_code:  # the vendor answered: nothing was created
                await self._fall_back(fid, flush, flush.cids, SUBMIT_ERROR, str(exc))
            else:  # no answer: it may have been created; found after CREATE_GRACE
                logger.warning("provider batches: desk %s: create of flush %s unanswered: %s", self.desk.id, fid, exc)
            return
        except ModelError as exc:
            await self._fall_back(fid, flush, flush.cids, SUBMIT_ERROR, str(exc))
            return
        await self._created(fid, flush, batch)

    async def _created(self, fid: str, flush: Flush, batch: str) -> None:
        flush.state, flush.batch, flush.created = "polling", batch, time.time()
        await self._save(fid, flush, time.time() + self.settings.poll_interval)
        n = len(flush.cids)
        logger.info("provider batches: %s batch %s created with %d requests", self.api.vendor, batch, n)
        await self._emit(flush.cids, events.BATCH_POLLING, batch_id=batch, count=n)
        await self._waiting_for(flush.cids, f"{self.api.vendor} batch {batch} ({n} requests)")

    async def _poll(self, fid: str, flush: Flush) -> None:
        now = time.time()
        if await self.desk.canceled(fid) >= len(flush.cids):  # every run waiting on it was canceled
            await self._cancel(flush)
            await self._save(fid, None, states=[(c, "canceled", "") for c in flush.cids])
            return
        try:
            poll = await self.api.poll(flush.batch)
        except ModelError as exc:
            flush.fails += 1
            if flush.fails >= POLL_TRIES:
                await self._cancel(flush)
                await self._fall_back(fid, flush, flush.cids, POLL_ERROR, str(exc))
            else:
                await self._save(fid, flush, now + self.settings.poll_interval)
            return
        flush.fails, flush.status = 0, poll.status
        if not poll.ended:
            if now >= flush.created + self.settings.timeout:
                await self._cancel(flush)
                await self._fall_back(fid, flush, flush.cids, TIMEOUT,
                                      f"no results after {self.settings.timeout:g}s")
            else:
                await self._save(fid, flush, now + self.settings.poll_interval)
            return
        await self._results(fid, flush, poll)

    async def _results(self, fid: str, flush: Flush, poll: Poll) -> None:
        try:
            results = await self.api.results(flush.batch, poll)
        except ModelError as exc:
            await self._fall_back(fid, flush, flush.cids, POLL_ERROR, str(exc))
            return
        await self._emit(flush.cids, events.BATCH_COMPLETED, batch_id=flush.batch, count=len(results),
                         status=poll.status)
        states, failed = [], []
        for cid in flush.cids:
            outcome = results.get(cid) or Outcome(MISSING, error=poll.error)
            if outcome.state == SUCCEEDED and outcome.reply is not None:
                reply = self.provider.price(batch_reply(outcome, self.api.vendor, flush.batch, cid))
                states.append((cid, "reply", reply.model_dump_json()))
                self._usage(reply)
            else:
                reason = outcome.state if outcome.state != MISSING or not poll.error else poll.status
                failed.append((cid, reason, outcome.error))
        flush.state = "ended"
        await self._save(fid, flush, time.time(), states)
        for cid, reason, error in failed:
            await self._fall_back(fid, flush, [cid], reason, error)
        await self._deliver(fid, flush)

    async def _cancel(self, flush: Flush) -> None:
        try:
            await self.api.cancel(flush.batch)
        except ModelError as exc:
            logger.warning("provider batches: cancelling %s batch %s failed: %s", self.api.vendor, flush.batch, exc)

    # -- delivery and fallback ------------------------------------------------------------------

    async def _fall_back(self, fid: str, flush: Flush, cids: list[str], reason: str, error: str) -> None:
        """Journal ``cids`` as to be called directly (``fallback:<reason>``), say so, then call and
        deliver (:meth:`_deliver` makes the calls of every request in that state)."""
        logger.warning("provider batches: %d request(s) of %s go direct (%s): %s", len(cids), self.api.provider,
                       reason, error)
        flush.state = "ended"
        await self._save(fid, flush, time.time(), [(c, f"fallback:{reason}", "") for c in cids])
        data: dict[str, object] = {"reason": reason, "error": error, "count": len(cids)}
        if flush.batch:
            data["batch_id"] = flush.batch
        await self._emit(cids, events.BATCH_FALLBACK, **data)
        metrics.BATCH_FALLBACKS.labels(self.api.provider, reason).inc(len(cids))

    async def _deliver(self, fid: str, flush: Flush) -> None:
        """Deliver every reply of the flush not delivered yet; make the direct calls of its requests
        that fell back; forget the flush once every request is done."""
        pending = [(cid, who, state, reply) for cid, (who, state, reply)
                   in zip(flush.cids, await self.desk.requests(flush.cids), strict=True)
                   if state not in ("done", "canceled")]
        direct = [(cid, who) for cid, who, state, _ in pending if state.startswith("fallback:")]
        if direct:
            await asyncio.gather(*(self._call_directly(fid, flush, cid, who) for cid, who in direct))
            pending = [(cid, who, state, reply) for cid, (who, state, reply)
                       in zip(flush.cids, await self.desk.requests(flush.cids), strict=True)
                       if state not in ("done", "canceled")]
        later = False
        for cid, who, state, reply in pending:
            if state != "reply" or not reply:
                later = True
                continue
            if who is None or await self._deliver_one(who, cid, Message.model_validate_json(reply)):
                await self._save(fid, flush, time.time() + DELIVER_RETRY, [(cid, "done", "")])
            else:
                later = True
        if later:
            await self._save(fid, flush, time.time() + DELIVER_RETRY)
        else:
            await self._save(fid, None)

    async def _call_directly(self, fid: str, flush: Flush, cid: str, who: Request | None) -> None:
        [payload] = await self.desk.payloads([cid])
        if payload is None or who is None:
            await self._save(fid, flush, time.time(), [(cid, "done", "")])
            return
        chat = Chat([Message.model_validate(m) for m in payload["messages"]])
        tools = [_Tool(t) for t in payload["tools"]]
        try:
            with acting_as(who.agent, run=who.run, session=who.session):
                reply = self.provider.price(await self.provider.direct.complete(chat, tools))  # type: ignore[arg-type]
            self._usage(reply)
        except ModelError as exc:  # the direct call failed too: the run fails with its error
            reply = failed_reply(exc)
        await self._save(fid, flush, time.time(), [(cid, "reply", reply.model_dump_json())])

    async def _deliver_one(self, who: Request, cid: str, reply: Message) -> bool:
        """Deliver ``reply`` to the run's current wait for ``cid``; False when the run has not
        journaled that wait yet (try again later). A run that ended takes nothing (True)."""
        keys = self.runner.keys
        with redis_errors("provider batches"):
            status, raw = await self.runner.client.hmget(keys.run(who.run), ["status", "state"])
        if status is None or status in ("done", "failed", "canceled"):
            return True
        wait = (json.loads(raw).get("model_wait") if raw else None) or {}
        if wait.get("kind") != PROVIDER_BATCH or (wait.get("payload") or {}).get("custom_id") != cid:
            return False
        done = await model_waits.deliver(self.runner.client, keys, who.run, str(wait["id"]), reply,
                                         retention=self.runner.retention, requeue_after=self.runner.requeue_after)
        if done.outcome == "resume":
            await self.runner.enqueue_resume(who.run)
        return True

    # -- what people see ------------------------------------------------------------------------

    def _usage(self, reply: Message) -> None:
        usage = Usage.of(reply)
        metrics.model_usage(self.api.provider, self.provider.model, {
            "input": usage.input_tokens, "output": usage.output_tokens,
            "cache_read": usage.cache_read_tokens, "cache_creation": usage.cache_creation_tokens,
        }, usage.cost_usd)

    async def _emit(self, cids: list[str], kind: str, **data: object) -> None:
        """One event per waiting run, into its session's stream."""
        base = {"provider": self.api.provider, "vendor": self.api.vendor, **data}
        sinks: dict[str, StreamSink] = {}
        for cid, (who, _, _) in zip(cids, await self.desk.requests(cids), strict=True):
            if who is None:
                continue
            sink = sinks.get(who.session)
            if sink is None:
                sink = sinks[who.session] = StreamSink(self.runner.client, self.runner.keys, who.session,
                                                       retention=self.runner.retention)
            sink(Event(kind=kind, agent=who.agent, run_id=who.run, session_id=who.session,
                       data={**base, "custom_id": cid}))
        for sink in sinks.values():
            await sink.flush()

    async def _waiting_for(self, cids: list[str], text: str) -> None:
        """Say on each waiting run's record what it waits for (never re-creating an expired one)."""
        script = registered(self.runner.client).control.mark_if_exists  # control_scripts.MARK_IF_EXISTS
        for who, _, _ in await self.desk.requests(cids):
            if who is not None:
                await run_script(script, [self.runner.keys.run(who.run)], ["waiting_for", text], origin=ORIGIN)
