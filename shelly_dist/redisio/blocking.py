"""Blocking Redis reads: they end when cancelled and outlast Redis outages (DESIGN §3 rule 11).

Every read that waits on Redis — XREAD on a session's event stream, a pub/sub wait, a watch's
re-read, the coordinator's wait for its children — goes through :func:`read_through`. Two failures
shaped it:

- **A cancellation swallowed under the read.** Python 3.11's ``asyncio.wait_for`` returns the inner
  result when its caller's cancellation and the inner work's completion land in the same loop
  iteration. redis-py sends every command through it, so a task cancelled while its ``XREAD`` is
  being sent keeps reading, forever when it reads in a loop (issue 12: ``shelly run`` hung after
  printing nothing, its event tail never stopping). So the read runs in a task of its own and the
  caller waits for it with ``asyncio.wait``, which never swallows: a cancelled caller always ends,
  and the read's task is cancelled and left to finish on its own. A cancellation that arrives while
  no read is in flight is caught by :func:`raise_if_cancelled`.
- **An outage.** redis-py's retry policy gives up after a few seconds of refused connections, and a
  reader that let that error escape died (issue 12: the coordinator's wake-up pump, then the
  coordinator waited forever). Here an error that means "Redis is not answering" is waited out with
  capped exponential backoff, for as long as it lasts, logged once at WARNING when the first reader
  of the process meets it and once when a read succeeds again. The caller then re-reads what it
  needs: the journal, not a notification that may have been lost meanwhile, is the truth.

Nothing here imports redis (the embedded path never pays for it): Redis's connection errors are
recognised through ``redis.exceptions`` only once something else has imported it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from shelly_dist.cancellation import pause, raise_if_cancelled

logger = logging.getLogger(__name__)

T = TypeVar("T")

BACKOFF_BASE = 0.1
"""Seconds before the first retry of a read that met an outage; doubled on every further failure."""
BACKOFF_CAP = 5.0
"""The longest pause between two retries: after Redis comes back, a reader notices within this."""


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` means Redis is not answering (refused, reset, timed out, loading its data),
    also when a store wrapped it (``StoreError`` raised ``from`` it), as opposed to a bad command."""
    kinds: tuple[type[BaseException], ...] = (OSError,)
    redis_errors = sys.modules.get("redis.exceptions")
    if redis_errors is not None:
        kinds += (redis_errors.ConnectionError, redis_errors.TimeoutError)
    seen = 0
    cause: BaseException | None = exc
    while cause is not None and seen < 5:
        if isinstance(cause, kinds):
            return True
        cause, seen = cause.__cause__, seen + 1
    return False


async def cancellable(read: Awaitable[T]) -> T:
    """Await ``read`` so that cancelling the caller always ends the caller, even when the library
    under ``read`` swallows the cancellation; the read itself is then cancelled and not awaited."""
    try:
        raise_if_cancelled()
    except asyncio.CancelledError:
        if asyncio.iscoroutine(read):
            read.close()
        raise
    inner = asyncio.ensure_future(read)
    try:
        await asyncio.wait({inner})
    except BaseException:
        inner.cancel()
        inner.add_done_callback(_retrieve)
        raise
    raise_if_cancelled()
    return inner.result()


def _retrieve(task: asyncio.Future[object]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.debug("an abandoned read ended with %r", task.exception())


class _Outage:
    """The process's view of Redis being unreachable, so each outage is logged once."""

    since: float | None = None

    @classmethod
    def begin(cls, origin: str, exc: BaseException) -> None:
        if cls.since is None:
            cls.since = time.monotonic()
            logger.warning("%s: Redis is not answering (%s: %s); waiting for it, retrying with backoff",
                           origin, type(exc).__name__, exc)

    @classmethod
    def end(cls, origin: str) -> None:
        if cls.since is not None:
            logger.warning("%s: Redis answers again after %.1fs; re-reading", origin, time.monotonic() - cls.since)
            cls.since = None


def backoff(attempt: int) -> float:
    """The pause before retry number ``attempt`` (0-based): exponential, capped, half jittered so
    many readers do not all reconnect in the same instant."""
    delay = min(BACKOFF_CAP, BACKOFF_BASE * 2**attempt)
    return delay / 2 + random.uniform(0, delay / 2)


async def read_through(
    origin: str,
    read: Callable[[], Awaitable[T]],
    *,
    until: float | None = None,
    on_outage: Callable[[], Awaitable[None]] | None = None,
) -> T:
    """``await read()`` until it answers, waiting out Redis outages; cancellation always ends it.

    ``read`` is called again after each outage error (so it must be safe to repeat: a read, or a
    resubscribe). ``on_outage`` runs after each such error (e.g. to drop a broken connection).
    ``until`` (a ``time.monotonic()`` deadline) bounds the wait: an outage still on then re-raises
    its last error. Any other error is raised at once. ``origin`` names the reader in the log.
    """
    attempt = 0
    while True:
        try:
            result = await cancellable(read())
        except Exception as exc:
            if not is_outage(exc):
                raise
            _Outage.begin(origin, exc)
            if on_outage is not None:
                await cancellable(on_outage())
            wait = backoff(attempt)
            if until is not None:
                left = until - time.monotonic()
                if left <= 0:
                    raise
                wait = min(wait, left)
            attempt += 1
            await pause(wait)
            continue
        if _Outage.since is not None:
            _Outage.end(origin)
        return result
