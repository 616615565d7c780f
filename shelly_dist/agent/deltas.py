"""A run's streamed text as events: what the provider writes, ``message_delta`` by
``message_delta``, to the run's event sink (see :mod:`shelly_dist.models.streaming`).

The run sets a :class:`RunDeltas` around its model call when a person watches its tree. Nothing
here is journaled: deltas are for the eyes only, and the reply reaches the journal and the
``message_added`` event whole, once, as when nothing streams. Where events cross processes (the
session's Redis stream) consecutive deltas of one run are merged into one event per write
(:class:`~shelly_dist.runtime.celery.journal.stream.StreamSink`), about ten a second.
"""

from __future__ import annotations

from collections.abc import Callable

from shelly_dist import events


class RunDeltas:
    """Turns one model call's stream into ``message_delta`` events of the run (``emit``)."""

    def __init__(self, emit: Callable[..., None]) -> None:
        self._emit = emit

    def begin(self) -> None:
        self._emit(events.MESSAGE_DELTA, text="", begin=True)

    def text(self, delta: str) -> None:
        if delta:
            self._emit(events.MESSAGE_DELTA, text=delta)
