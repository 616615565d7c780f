"""One long-lived event loop per worker process (DESIGN §3 rule 11).

Celery has no native async tasks, and gevent breaks asyncio clients, so each worker process runs a
single asyncio loop in a daemon thread. That loop owns everything with a connection — the Redis
client, the model HTTP clients, MCP sessions — and task bodies (threads of the ``threads`` pool)
hand it coroutines and wait for the result. Many runs therefore share one process: a thread
waiting on a model call costs a stack, not a process.

The loop is started lazily on the first task (so it is created after any fork) and closed at
worker shutdown.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from shelly_dist.observability import metrics
from shelly_dist.runtime.celery.children.cancel import CancelWatch
from shelly_dist.runtime.celery.children.join import enqueue_resume
from shelly_dist.runtime.celery.fast_send import TaskSend
from shelly_dist.runtime.celery.journal import Journal
from shelly_dist.runtime.celery.settings import RuntimeSettings
from shelly_dist.runtime.celery.worker.batch_runner import DeskRunner
from shelly_dist.runtime.celery.worker.executor import Executor, WorkerContext
from shelly_dist.runtime.celery.worker.orphans import sweeper_for
from shelly_dist.runtime.celery.worker.reaper import Reaper

logger = logging.getLogger(__name__)

T = TypeVar("T")

REDIS_MAX_CONNECTIONS = 2000
"""The worker's Redis pool cap: above ``--concurrency`` (one command in flight per run at most,
plus pub/sub), below Redis's default ``maxclients`` (10,000) across a few processes."""


@dataclass
class WorkerSpec:
    """What a worker needs before it can take tasks: settings, and how to open its context."""

    settings: RuntimeSettings
    fingerprint: str
    open: Callable[[], Awaitable[WorkerContext]]


class WorkerProcess:
    """The process-wide loop thread, its Redis client and its :class:`Executor`."""

    _instance: WorkerProcess | None = None
    _lock = threading.Lock()

    def __init__(self, spec: WorkerSpec, sender: Callable[[], TaskSend], hostname: str) -> None:
        self.spec = spec
        self._sender = sender
        """Makes this process's task sender, on the loop (its Redis client belongs to the loop)."""
        self.hostname = hostname
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="shelly-loop", daemon=True)
        self._thread.start()
        try:
            self.executor: Executor = self.call(self._open())
        except BaseException:  # nothing is left running: the next task (or start-up) tries afresh
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
            raise

    @classmethod
    def get(cls, spec: WorkerSpec, sender: Callable[[], TaskSend], hostname: str) -> WorkerProcess:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls(spec, sender, hostname)
            return cls._instance

    @classmethod
    def shutdown(cls) -> None:
        with cls._lock:
            if cls._instance is not None:
                cls._instance.close()
                cls._instance = None

    async def _open(self) -> Executor:
        from shelly_dist.redisio.connection import connect

        settings = self.spec.settings
        ctx = await self.spec.open()
        self._ctx = ctx
        # redis-py's asyncio pool defaults to 100 connections and fails (MaxConnectionsError) past
        # them; hundreds of runs in one process burst past that when they start together.
        self._client = connect(settings.redis_url, client_name=f"shelly-worker:{self.hostname}",
                               max_connections=REDIS_MAX_CONNECTIONS)
        journal = Journal(self._client, settings)
        journal.renewer.worker = self.hostname  # receipts of task messages name this worker
        journal.renewer.fingerprint = ctx.fingerprint  # and are not taken for another generation's runs
        await asyncio.to_thread(journal.renewer.connect)  # resolve and connect now, not mid-step
        self._cancel = CancelWatch(self._client, journal.keys)
        await self._cancel.start()

        self._send = send = self._sender()

        async def enqueue(name: str, args: list[Any], kwargs: dict[str, Any]) -> bool:
            took = await send(name, args, kwargs)
            await journal.sent(args[1], args[0], took)  # refused: the reapers resend it at once
            return took

        self._reaper = Reaper(journal, enqueue, self.spec.fingerprint)
        self._reaper.start()
        self._orphans = sweeper_for(journal)  # a Redis broker's messages a dead worker took unreceived
        if self._orphans is not None:
            self._orphans.start()
        self._desks: DeskRunner | None = None
        batching = getattr(ctx, "batching", None)  # the engine's PoolBatching: provider batches
        if batching is not None:
            self._desks = DeskRunner(batching, enqueue_resume=lambda run_id: enqueue_resume(journal, enqueue, run_id),
                                     requeue_after=settings.requeue_after)
            self._desks.start()
        self._lag = asyncio.create_task(metrics.watch_loop_lag(), name="shelly-loop-lag")
        logger.info("worker loop ready on %s (config %s)", self.hostname, self.spec.fingerprint)
        return Executor(ctx, journal, enqueue, self._cancel, hostname=self.hostname)

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result (from any thread but the loop's)."""
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(self._wrap(coro), self.loop)
        return future.result()

    @staticmethod
    async def _wrap(coro: Coroutine[Any, Any, T]) -> T:
        # A task of its own, so CancelWatch can cancel exactly this step.
        return await asyncio.ensure_future(coro)

    def close(self) -> None:
        self.executor.journal.renewer.close()

        async def _close() -> None:
            self._lag.cancel()
            await self._reaper.aclose()
            if self._orphans is not None:
                await self._orphans.aclose()
            if self._desks is not None:
                await self._desks.aclose()
            await self._cancel.aclose()
            await self._send.aclose()
            await self._ctx.aclose()
            await self._client.aclose()
            try:
                from shelly_dist.providers.http import aclose_http_client

                await aclose_http_client()
            except Exception:  # nothing was opened
                pass

        try:
            asyncio.run_coroutine_threadsafe(_close(), self.loop).result(timeout=10)
        except Exception as exc:
            logger.warning("worker loop shutdown: %s", exc)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
