"""Tools' blocking file work, on threads of its own and under a deadline.

A blocking call can hang for good: ``open()`` of a FIFO nobody writes, a read from a hung network
mount. On asyncio's default executor (``min(32, cpus + 4)`` threads: 6 on two cores) a handful of
such calls would take every thread, and with them all the process runs there: the worker's task
sends, ``loop.getaddrinfo`` (a Redis reconnect), session saves. Tool file work runs instead on
:data:`THREADS` daemon threads of its own (:func:`run_blocking`), and a call waits at most
:data:`IO_TIMEOUT` seconds for a thread and its work; after that the tool gets an error. A stuck
thread cannot be killed (Python has no way), so it stays taken until its call returns; when all
are stuck, tool file work fails at its deadline while the rest of the process runs on. The
threads are daemons, so a stuck one never holds up the process's exit.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from shelly_dist.errors import ToolError

T = TypeVar("T")

THREADS = 8
IO_TIMEOUT = 60.0
"""Seconds a tool's file operation may take, queueing included."""

_Job = tuple[Callable[[], Any], "Future[Any]"]


class _Pool:
    """A fixed set of daemon threads started on first use, fed from one queue."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._started = 0
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._started < self._size:
                self._started += 1
                threading.Thread(target=self._work, name=f"shelly-tool-io-{self._started}", daemon=True).start()
        self._jobs.put((fn, future))
        return future

    def _work(self) -> None:
        while True:
            fn, future = self._jobs.get()
            if not future.set_running_or_notify_cancel():  # its caller gave up while it queued
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)


_pool = _Pool(THREADS)


async def run_blocking(tool: str, fn: Callable[..., T], *args: Any, time_limit: float | None = None) -> T:
    """``fn(*args)`` on a tool I/O thread (in this context, as ``asyncio.to_thread`` does); a
    ``ToolError`` naming ``tool`` if it has not returned within ``time_limit`` (default
    :data:`IO_TIMEOUT`)."""
    limit = IO_TIMEOUT if time_limit is None else time_limit
    context = contextvars.copy_context()
    future = asyncio.wrap_future(_pool.submit(lambda: context.run(fn, *args)))
    try:
        return await asyncio.wait_for(future, limit)
    except TimeoutError as exc:
        raise ToolError(
            f"{tool}: the file operation did not finish within {limit:g}s (a FIFO, a device or a hung "
            "mount?); it may still complete",
            tool=tool,
        ) from exc
