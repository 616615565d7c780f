"""Redis refusing writes while it still answers reads: full (``maxmemory`` under ``noeviction``),
a read-only replica, or persistence failing (``MISCONF``).

Unlike an outage (:func:`shelly_dist.redisio.blocking.is_outage`), every read still works, so nothing
that waits on reads notices; and a Celery task that meets it and asks to be retried cannot publish
its retry (the broker is the same full Redis), so before this module the worker called the error
unrecoverable and exited (issue 25). Here one classifier names the refusal; the run journal's and
the event stream's writes wait it out with capped backoff (:func:`write_through`), on workers and
coordinators alike; a worker task that still meets one waits and advances its run again
(``runtime/celery/worker/tasks.py``); and a coordinator waiting on its children probes for it. Each process
says so once at WARNING (on ``shelly run``'s stderr) when the refusal starts, and once when it ends.

The probe is ``LPUSHX`` on a key that never exists: a write command Redis refuses exactly as it
refuses any other write, and one that changes nothing when it is accepted.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

from shelly_dist.cancellation import pause

logger = logging.getLogger(__name__)

T = TypeVar("T")

BACKOFF = (0.1, 5.0)
"""First and longest pause (seconds, doubling) between two tries of a refused write."""


def refusal(exc: BaseException) -> str | None:
    """``Redis refuses writes (<reason>): <Redis's message>`` when ``exc`` (or an error it was
    raised ``from``, such as a ``StoreError`` around a redis error) is a write refusal; else None."""
    errors = sys.modules.get("redis.exceptions")
    if errors is None:
        return None
    cause: BaseException | None = exc
    for _ in range(6):
        if cause is None:
            return None
        reason = _reason(cause, errors)
        if reason is not None:
            return f"Redis refuses writes ({reason}): {cause}"
        cause = cause.__cause__ or cause.__context__
    return None


def _reason(exc: BaseException, errors: object) -> str | None:
    if isinstance(exc, errors.OutOfMemoryError):  # type: ignore[attr-defined]
        return "maxmemory"
    if isinstance(exc, errors.ReadOnlyError):  # type: ignore[attr-defined]
        return "read-only replica"
    if isinstance(exc, errors.ResponseError) and str(exc).startswith("MISCONF"):  # type: ignore[attr-defined]
        return "persistence failing"
    return None


async def probe_writes(client: object, key: str) -> str | None:
    """Whether Redis takes a write now (``key``: ``Keys.write_probe()``): None when it does (or when
    the probe fails for another reason: an outage is another module's business), else the refusal's
    description."""
    try:
        await client.lpushx(key, "probe")  # type: ignore[attr-defined]
    except Exception as exc:
        return refusal(exc)
    return None


async def write_through(write: Callable[[], Awaitable[T]]) -> T:
    """``await write()``, tried again while Redis refuses writes, for as long as it does (cancelling
    the caller ends the wait); any other error propagates at once."""
    wait = BACKOFF[0]
    refused = False
    while True:
        try:
            result = await write()
        except Exception as exc:
            reason = refusal(exc)
            if reason is None:
                raise
            refused = True
            NOTICE.update(reason)
            await pause(wait)
            wait = min(wait * 2, BACKOFF[1])
            continue
        if refused:
            NOTICE.update(None)
        return result


class RefusalNotice:
    """Says once at WARNING when Redis starts refusing writes (with what to do) and once when it
    takes them again, however often writers and probes report."""

    def __init__(self) -> None:
        self.refused: str | None = None

    def update(self, refused: str | None) -> None:
        if refused and not self.refused:
            logger.warning("%s; waiting until Redis takes writes again (free memory or raise maxmemory; "
                           "for a replica, point at the primary)", refused)
        elif self.refused and not refused:
            logger.warning("Redis takes writes again; going on")
        self.refused = refused


NOTICE = RefusalNotice()
"""This process's notice: one warning per refusal, whichever writer or probe meets it first."""
