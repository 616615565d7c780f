"""Kombu's Redis transport, fixed so a worker survives its broker Redis restarting.

The failure (kombu issues #582, #970): when the broker connection breaks while the worker holds
unacknowledged tasks (always, for a busy worker: tasks are acknowledged late), Celery's consumer
calls ``Connection.collect()`` and then ``Connection.close()``. ``collect()`` closes the default
channel — which stops half-way, on a connection error, before the channel counts as closed — and
then detaches the transport from its connection (``transport.client = None``). ``close()`` closes
the channel again; restoring the unacknowledged messages rebuilds the channel's connection pool
from ``transport.client``, now ``None``: ``AttributeError: 'NoneType' object has no attribute
'hostname'``. That is no connection error, so Celery logs ``Unrecoverable error`` and the worker
exits.

:func:`install` makes that step fail as what it is, a connection error (the channel's connection
is closed), which Celery's reconnect loop handles: the consumer reconnects and the worker keeps
running, its in-flight tasks too. The messages not restored stay in the transport's unacked index
and are redelivered after the visibility timeout; a duplicate is dropped by its run's claim, and
the reapers re-enqueue a run whose lease lapses long before that.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import redis
from kombu.transport import redis as kombu_redis

logger = logging.getLogger(__name__)

_MARK = "_shelly_closed_connection_is_a_connection_error"


WRITE_REFUSALS: tuple[type[Exception], ...] = (redis.exceptions.OutOfMemoryError, redis.exceptions.ReadOnlyError)
"""Redis refusing writes (full under ``noeviction``; a read-only replica). Kombu calls them channel
errors, so an acknowledgement refused by a full Redis (its ``MULTI`` is refused as a whole) ended
the worker as ``Unrecoverable error``; as connection errors, the consumer logs the refused
acknowledgement and reconnects with backoff, and the worker lives (issue 25)."""


def install() -> None:
    """Patch kombu's Redis channel and transport once per process (idempotent)."""
    transport = kombu_redis.Transport
    missing = tuple(e for e in WRITE_REFUSALS if e not in transport.connection_errors)
    transport.connection_errors = (*transport.connection_errors, *missing)
    channel = kombu_redis.Channel
    if getattr(channel._connparams, _MARK, False):
        return
    original = channel._connparams

    @functools.wraps(original)
    def connparams(self: Any, *args: Any, **kwargs: Any) -> Any:
        transport = self.connection
        if transport is None or transport.client is None:
            logger.warning("broker: the connection to Redis closed under a channel in use (kombu #582); "
                           "the consumer reconnects, unacknowledged tasks return after the visibility timeout")
            raise redis.exceptions.ConnectionError("broker: the channel's connection is closed")
        return original(self, *args, **kwargs)

    setattr(connparams, _MARK, True)
    channel._connparams = connparams  # type: ignore[method-assign]
