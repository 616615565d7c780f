"""One lease renewer per worker process, on a thread of its own (DESIGN §3 rule 3).

A lease means "the holding process is alive and its event loop is not hung". Renewing each lease
from a task on the event loop made it mean "the loop got scheduled within a quarter lease": a loop
starved by hundreds of runs waking at once, or blocked by a step doing sync or CPU-heavy work,
renewed too late, the leases lapsed, and the reapers re-enqueued runs whose steps were still
running (fencing made that safe, not cheap: every such step was done twice).

So the :class:`Renewer` is a daemon thread with its own synchronous Redis client. Every quarter
lease it renews every lease the process holds in one round trip: one call of the fenced ``RENEW``
script carrying all of them (on a Redis Cluster one call per run tree, since a script touches one
slot and a tree's keys share its hash tag). Load on the event loop cannot delay it.

What still ends a lease, as before: a renewal refused (someone else holds the run, or the lease
lapsed), or one that cannot reach Redis before the lease lapses. The step is then marked lost and
cancelled on its own loop (``call_soon_threadsafe``), and abandoned.

And a watchdog: each tick posts a no-op to every loop holding leases. A loop that has not run one
for longer than ``hang_limit`` is hung, and its leases are no longer renewed, so they lapse and
the reapers recover its runs. The limit is the step time limit: a loop blocked for less may be
running a legitimate step (a CPU-heavy tool), and one blocked for longer has failed that step
anyway (its ``asyncio.timeout`` fires as soon as the loop runs again), so its runs are better
carried on elsewhere. A hung loop is also what the liveness probe restarts the worker for
(``shelly worker``'s heartbeat file). A process killed (``kill -9``) or stopped (``SIGSTOP``)
stops this thread with it, so recovery after a crash still takes about ``lease + reap_interval``.

And receipts: a task message the process has received but whose run it has not claimed yet
(prefetched behind busy threads, held for a retry's countdown, or between the consumer and the
claim) is marked received the moment it arrives (:meth:`Renewer.receive`, ``scripts.RECEIVED``)
and re-marked every tick until its task ends. Its run's deadline is then about a lease away while
the process lives, so when it dies a reaper sends the run again within about ``lease +
reap_interval`` — not the broker after its visibility timeout (eleven minutes by default), which
is when Redis' transport would restore the dead consumer's unacknowledged message. That late
copy, and RabbitMQ's immediate one, are dropped by the run's claim.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException, RedisError
from redis.retry import Retry

from shelly_dist.observability import metrics
from shelly_dist.redisio.connection import sync_client
from shelly_dist.redisio.keys import Keys, tree_tag
from shelly_dist.runtime.celery.journal.due import queue_hint, shard_of
from shelly_dist.runtime.celery.journal.record import RunRecord
from shelly_dist.runtime.celery.journal.registry import registered
from shelly_dist.runtime.celery.settings import RuntimeSettings

logger = logging.getLogger(__name__)


class Renewable(Protocol):
    """What the renewer needs of a lease (:class:`~.lease.Lease` is one): which run, whose token,
    until when; and ``lost``, which the renewer sets when a renewal is refused. A protocol, so the
    lease can ask the renewer to keep it without the two modules importing each other."""

    token: str
    deadline: float
    lost: bool

    @property
    def run_id(self) -> str: ...

    @property
    def record(self) -> RunRecord: ...


def renew_request(
    keys: Keys, settings: RuntimeSettings, leases: Sequence[Renewable], now: float
) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV of one ``RENEW`` call for ``leases`` (see ``scripts.RENEW``)."""
    names: list[str] = []
    args: list[Any] = [settings.lease_ms, int(now * 1000)]
    for lease in leases:
        names += [keys.run_lease(lease.run_id), keys.tree_deadlines(lease.record.root)]
        args += [lease.token, lease.run_id]
    return names, args


@dataclass(frozen=True)
class Receipt:
    """A task message this process received for run ``run_id`` of tree ``root``."""

    root: str
    run_id: str
    since: float = 0.0
    """When it arrived (``time.monotonic()``)."""
    count: int = 1
    """Deliveries of the task held at once: a retry's new message (same task id) may arrive
    before the retried one's end is reported."""


@dataclass(eq=False)
class _Held:
    """A lease being kept, the step it keeps, and the loop that step runs on."""

    lease: Renewable
    step: asyncio.Task[Any]
    loop: asyncio.AbstractEventLoop
    released: bool = False
    """Set on the loop when the step let the lease go: a late loss must not cancel what follows."""


class Renewer:
    """Keeps the leases of one process: see the module docstring."""

    def __init__(
        self,
        settings: RuntimeSettings,
        keys: Keys,
        *,
        clustered: bool = False,
        connect: Callable[[], redis.Redis] | None = None,
        hang_limit: float | None = None,
    ) -> None:
        self.settings = settings
        self.keys = keys
        self.clustered = clustered
        self.interval = settings.heartbeat_interval
        self.hang_limit = settings.step_time_limit if hang_limit is None else hang_limit
        """Seconds a loop may go without running a callback before its leases are left to lapse."""
        self._connect = connect or self._default_client
        self._client: redis.Redis | None = None
        self._script: Any = None
        self._held: dict[str, _Held] = {}
        self._received: dict[str, Receipt] = {}
        """The messages received and not yet done with, by delivery (see the module docstring)."""
        self.worker = ""
        """The name receipts are recorded under (the worker's hostname)."""
        self.fingerprint = ""
        """The worker's config generation: a run of another one is not marked (``scripts.RECEIVED``)."""
        self._ticks: dict[asyncio.AbstractEventLoop, float] = {}
        """When (``time.monotonic()``) each loop last ran the watchdog's no-op."""
        self._hung: set[asyncio.AbstractEventLoop] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _default_client(self) -> redis.Redis:
        # No retries and short timeouts: one tick never outlasts a quarter lease; the next tick retries.
        return sync_client(self.settings.redis_url, decode_responses=True, socket_timeout=self.interval,
                           socket_connect_timeout=self.interval, retry=Retry(NoBackoff(), 0),
                           client_name="shelly-renewer")

    def connect(self) -> None:
        """Open the thread's connection now (``shelly worker``'s start), not at the first tick.

        A first connection made while a step is in flight resolves Redis' host name then, and in a
        container network that lookup can hang for half a minute while the network changes (a
        container started or removed beside it: seen with podman's DNS) — longer than a lease,
        so every lease of the process lapsed and its steps were redone elsewhere. Connected at
        start, ticks reuse the connection; only a reconnect after an error resolves again. Redis
        being away at start is logged: the first tick connects instead."""
        try:
            self._client = self._connect()
            self._script = registered(self._client).journal.renew
            self._client.ping()
        except (RedisError, RedisClusterException, OSError) as exc:
            logger.info("lease renewer: could not connect at start (%s); the first renewal will", exc)

    # -- called on the event loop ---------------------------------------------------------------

    def hold(self, lease: Renewable, step: asyncio.Task[Any]) -> None:
        """Keep ``lease`` until :meth:`release`; if it is lost, mark it and cancel ``step``. Call
        from the loop ``step`` runs on (that loop is then watched)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            self._held[lease.token] = _Held(lease, step, loop)
            self._ticks[loop] = time.monotonic()
            self._start()

    def _start(self) -> None:
        """Start the thread (under ``_lock``) unless it runs."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="shelly-renewer", daemon=True)
            self._thread.start()

    # -- called from the worker's consumer and task threads -----------------------------------

    def receive(self, delivery: str, root: str, run_id: str) -> None:
        """The worker received run ``run_id``'s task message (``delivery`` names it until
        :meth:`done`): mark it received now (one round trip on the caller's thread, so a process
        killed right after still leaves the mark) and at every tick until then. Redis away is
        logged: the next tick marks it."""
        with self._lock:
            held = self._received.get(delivery)
            receipt = Receipt(root or run_id, run_id, time.monotonic(), held.count + 1 if held else 1)
            self._received[delivery] = receipt
            self._start()
        try:
            self._mark([receipt])
        except (RedisError, RedisClusterException, OSError) as exc:
            logger.info("run %s: could not mark its task received (%s); the next tick will", run_id, exc)

    def done(self, delivery: str) -> None:
        """The task of ``delivery`` ended (or went back to the broker): stop marking it. A mark
        left lapses within a lease; a run claimed meanwhile is kept by its lease."""
        with self._lock:
            held = self._received.pop(delivery, None)
            if held is not None and held.count > 1:
                self._received[delivery] = Receipt(held.root, held.run_id, held.since, held.count - 1)

    def _mark(self, receipts: Sequence[Receipt]) -> None:
        """``RECEIVED`` for ``receipts``: on a single Redis in one pipeline, each call hinting the
        due index inside the script where it pulled a deadline in (one command per receipt); on a
        cluster one call per receipt (a script touches its tree's slot), the hints after them."""
        if self._client is None:
            self._client = self._connect()
            self._script = registered(self._client).journal.renew
        scripts = registered(self._client)
        now_ms = int(time.time() * 1000)
        at = now_ms + self.settings.lease_ms

        def keys_args(r: Receipt) -> tuple[list[str], list[Any]]:
            keys = [self.keys.tree_deadlines(r.root), self.keys.run_lease(r.run_id), self.keys.run(r.run_id),
                    self.keys.run_received(r.run_id)]
            return keys, [r.run_id, now_ms, self.settings.lease_ms, self.worker or "worker", self.fingerprint]

        if not self.clustered:
            hinted = scripts.hinted(scripts.journal.received)
            pipe = self._client.pipeline(transaction=False)
            for r in receipts:
                keys, args = keys_args(r)
                shard = shard_of(r.root)
                hinted(keys=[*keys, self.keys.due_shard(shard), self.keys.due_versions(shard)],
                       args=[*args, r.root, at, self.settings.retention], client=pipe)
            pipe.execute()
            return
        moved = []
        for r in receipts:
            keys, args = keys_args(r)
            moved.append(scripts.journal.received(keys=keys, args=args))
        roots = {r.root for r, m in zip(receipts, moved, strict=True) if int(m or 0)}
        if roots:
            pipe = self._client.pipeline(transaction=False)
            for root in roots:
                queue_hint(pipe, self.keys, self.settings.retention, root, at)
            pipe.execute()

    def release(self, lease: Renewable) -> None:
        """Stop keeping ``lease`` (its step ended); a loss noticed meanwhile is ignored."""
        with self._lock:
            held = self._held.pop(lease.token, None)
        if held is not None:
            held.released = True

    def close(self) -> None:
        """Stop the thread and close its client (the process is shutting down)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5)
        if self._client is not None:
            self._client.close()

    # -- the thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except Exception:  # the thread must outlive any surprise, or every lease lapses
                logger.exception("lease renewer: tick failed")

    def tick(self) -> None:
        """One round: watch the loops, then renew the leases of the loops that answer."""
        with self._lock:
            held = list(self._held.values())
            loops = {h.loop for h in held}
            for gone in set(self._ticks) - loops:
                del self._ticks[gone]
        now = time.monotonic()
        answering = {loop for loop in loops if not self._is_hung(loop, now)}
        for loop in loops:
            self._ping(loop)
        live = [h for h in held if h.loop in answering]
        for group in self._groups(live):
            self._renew(group)
        with self._lock:
            # A receipt never ended (a task Celery dropped without running it) stops being kept
            # after the visibility timeout, when the broker would have sent its message again.
            cut = time.monotonic() - self.settings.visibility_timeout
            for delivery in [d for d, r in self._received.items() if r.since < cut]:
                del self._received[delivery]
            receipts = list(self._received.values())
        if receipts:
            try:
                self._mark(receipts)
            except (RedisError, RedisClusterException, OSError) as exc:
                logger.info("lease renewer: marking %d received task(s) failed (%s); retrying next tick",
                            len(receipts), exc)

    def _is_hung(self, loop: asyncio.AbstractEventLoop, now: float) -> bool:
        silent = now - self._ticks.get(loop, now)
        if silent <= self.hang_limit:
            if loop in self._hung:  # news, not trouble: its steps found their leases lost, if they lapsed
                self._hung.discard(loop)
                logger.info("lease renewer: the event loop runs again; renewing the leases it still holds")
            return False
        if loop not in self._hung:
            self._hung.add(loop)
            logger.warning("lease renewer: the event loop has not run for %.1fs, over the %gs hang limit "
                           "(the step time limit); its leases are left to lapse for the reapers", silent,
                           self.hang_limit)
        return True

    def _ping(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            loop.call_soon_threadsafe(self._ticked, loop)
        except RuntimeError:  # a closed loop never ticks again: its leases lapse
            pass

    def _ticked(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            if loop in self._ticks:
                self._ticks[loop] = time.monotonic()

    def _groups(self, held: list[_Held]) -> list[list[_Held]]:
        """One group for a single Redis; one per run tree (hash slot) on a cluster."""
        if not held or not self.clustered:
            return [held] if held else []
        groups: dict[str, list[_Held]] = {}
        for h in held:
            groups.setdefault(tree_tag(h.lease.record.root), []).append(h)
        return list(groups.values())

    def _renew(self, group: list[_Held]) -> None:
        started = time.time()
        names, args = renew_request(self.keys, self.settings, [h.lease for h in group], started)
        try:
            if self._client is None:
                self._client = self._connect()
                self._script = registered(self._client).journal.renew
            answers = self._script(keys=names, args=args)
        except (RedisError, RedisClusterException) as exc:  # a cluster's routing errors are not RedisErrors
            late = [h for h in group if time.time() + self.interval >= h.lease.deadline]
            if len(late) < len(group):  # no lease is at risk yet: the next tick retries
                logger.info("lease renewer: renewing %d leases failed (%s); retrying next tick",
                            len(group) - len(late), exc)
            for h in late:
                self._lose(h, f"not renewed before it lapsed ({exc})")
            return
        for h, kept in zip(group, answers, strict=True):
            if int(kept):
                h.lease.deadline = started + self.settings.lease
                metrics.LEASES_RENEWED.inc()
            else:
                self._lose(h, "held by another worker")

    def _lose(self, held: _Held, reason: str) -> None:
        if held.released:  # its step let it go meanwhile (a finish deletes the lease): not a loss
            return
        logger.warning("run %s: lease lost (%s); abandoning the step", held.lease.run_id, reason)
        metrics.LEASES_LOST.inc()
        with self._lock:
            self._held.pop(held.lease.token, None)

        def abandon() -> None:
            if not held.released:
                held.lease.lost = True
                held.step.cancel()

        try:
            held.loop.call_soon_threadsafe(abandon)
        except RuntimeError:  # the loop is closed: nothing of the step is left to cancel
            pass
