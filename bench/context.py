"""What a scenario is handed: the stack, the sizes, the number of runs, and the raw reference.

The raw Celery reference (:mod:`bench.raw_celery`) is started on first use and shared by the
scenarios that compare against it. Its client calls block (``AsyncResult.get``, bounded by
:data:`RAW_TIMEOUT`), so scenarios run them in a thread, off the coordinator's event loop.

Every step a scenario waits on goes through :meth:`Bench.step`, which gives it a deadline and, on
overrun, fails the bench with the step's name and the tail of each worker's log: no scenario can
stall for minutes without saying where.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from celery import Celery

from bench.harness import START_TIMEOUT, Stack
from bench.procs import BenchError
from bench.raw_celery import NOOP, create_app
from bench.team import Sizes

T = TypeVar("T")

STEP = 60.0
"""Seconds any one measured step may take (the slowest full-size step takes a few seconds)."""

RAW_TIMEOUT = 30.0
"""Seconds a raw Celery result may take (a no-op: anything near this is a stall)."""


async def timed(action: Callable[[], Awaitable[Any]]) -> float:
    """Seconds ``action`` takes."""
    start = time.perf_counter()
    await action()
    return time.perf_counter() - start


@dataclass
class Bench:
    stack: Stack
    sizes: Sizes
    runs: int
    _raw: Celery | None = field(default=None, repr=False)
    current: str = ""
    """The step running now (named when a scenario's own deadline expires)."""

    async def step(self, what: str, within: float, action: Awaitable[T]) -> T:
        """Await ``action`` for at most ``within`` s; ``BenchError`` naming ``what`` if it overruns.

        A step that takes more than a quarter of its deadline is named on stderr as it ends."""
        self.current = what
        deadline = asyncio.timeout(within)
        start = time.monotonic()
        try:
            async with deadline:
                return await action
        except TimeoutError:
            if not deadline.expired():
                raise
            raise BenchError(f"bench: {what}: overran its {within:g}s deadline{self.stack.tails()}") from None
        finally:
            took = time.monotonic() - start
            if took > within / 4:
                print(f"bench: {what}: slow, {took:.1f}s of its {within:g}s", file=sys.stderr, flush=True)

    def _raw_app(self) -> Celery:
        if self._raw is None:
            self.stack.start_raw_worker(self.sizes.concurrency)
            self._raw = create_app(self.stack.broker_url, self.stack.broker_url, self.stack.raw_queue)
            self._send_and_get(1, timeout=START_TIMEOUT)  # the worker is up and warm
        return self._raw

    def _send_and_get(self, n: int, timeout: float = RAW_TIMEOUT) -> None:
        assert self._raw is not None
        results = [self._raw.send_task(NOOP, queue=self.stack.raw_queue) for _ in range(n)]
        self.stack.raw_task_ids += [r.id for r in results]
        for r in results:
            r.get(timeout=timeout)

    async def raw_roundtrip(self, n: int) -> float:
        """Mean seconds of ``n`` sequential raw ``delay().get()`` round trips."""

        def run() -> float:
            self._raw_app()
            start = time.perf_counter()
            for _ in range(n):
                self._send_and_get(1)
            return (time.perf_counter() - start) / n

        return await asyncio.to_thread(run)

    async def raw_rate(self, n: int) -> float:
        """Raw no-op tasks per second: ``n`` sent at once, until the last result is in."""

        def run() -> float:
            self._raw_app()
            start = time.perf_counter()
            self._send_and_get(n)
            return n / (time.perf_counter() - start)

        return await asyncio.to_thread(run)

    def close(self) -> None:
        if self._raw is not None:
            self._raw.close()
