"""The events of an embedded session, kept beside its saved conversation for ``shelly events``.

On a pool every event goes to the session's Redis stream, which ``shelly events`` reads. Embedded,
with no Redis, the events lived only on the engine's bus: a warning such as ``reply_truncated``
was gone with the process, and ``shelly events`` refused to run without a broker. The
:class:`EventRecorder` subscribes to the bus and appends each session's events, one JSON object a
line (:class:`~shelly_dist.events.Event`), to ``<sessions>/<id>/events.jsonl`` in the state
directory; :func:`read_events` reads them back, following the file with ``follow``.

Bounded: past :data:`MAX_BYTES` the file is rotated (one older file is kept), so a long-lived
session does not grow its log without end. A state directory that cannot be written costs one
warning, never the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

from shelly_dist.engine.eventbus import EventBus, Subscription
from shelly_dist.engine.sessions import check_session_id
from shelly_dist.errors import UsageError
from shelly_dist.events import Event, add_merging

logger = logging.getLogger(__name__)

EVENTS = "events.jsonl"
MAX_BYTES = 8 * 1024 * 1024
"""A session's event log is rotated past this size (``events.jsonl.1`` holds the previous one)."""
FOLLOW_POLL = 0.5
"""Seconds between looks at a followed log for new lines."""


def events_path(sessions: Path, session_id: str) -> Path:
    return sessions / check_session_id(session_id) / EVENTS


def _saved_id(session_id: str) -> bool:
    """Whether ``session_id`` can be a saved session's (a Python API caller may name its own)."""
    try:
        check_session_id(session_id)
    except UsageError:
        return False
    return True


def _append(sessions: Path, batch: list[Event]) -> None:
    by_session: dict[str, list[Event]] = {}
    for event in batch:
        if event.session_id and _saved_id(event.session_id):
            add_merging(by_session.setdefault(event.session_id, []), event)  # a streamed reply: not a line a token
    for session_id, kept in by_session.items():
        lines = [e.model_dump_json() for e in kept]
        path = events_path(sessions, session_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_file() and path.stat().st_size > MAX_BYTES:
            os.replace(path, path.with_name(EVENTS + ".1"))
        with path.open("a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))


class EventRecorder:
    """Appends the bus's session events to their logs, in batches, off the event loop."""

    def __init__(self, bus: EventBus, sessions: Path) -> None:
        self.sessions = sessions
        self._sub: Subscription = bus.subscribe(buffer=65_536)
        self._task = asyncio.create_task(self._record(), name="shelly-event-log")
        self._broken = False

    async def _record(self) -> None:
        while (event := await self._sub.get()) is not None:
            batch = [event]
            while not self._sub.empty():
                more = await self._sub.get()
                if more is None:
                    break
                batch.append(more)
            if self._broken:
                continue
            try:
                await asyncio.to_thread(_append, self.sessions, batch)
            except (OSError, ValueError) as exc:
                self._broken = True
                logger.warning("events: cannot keep the session events in %s: %s (set SHELLY_STATE_DIR to a "
                               "writable directory)", self.sessions, exc)

    async def aclose(self) -> None:
        """Write what is buffered, then stop."""
        self._sub.close()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def read_events(sessions: Path, session_id: str, *, follow: bool = False) -> AsyncIterator[Event]:
    """The session's recorded events in order; with ``follow``, then every new one as it is written."""
    path = events_path(sessions, session_id)
    offset = 0
    while True:
        if path.is_file():
            with path.open("rb") as f:
                if f.seek(0, os.SEEK_END) < offset:
                    offset = 0  # rotated: the new file starts over
                f.seek(offset)
                for raw in f:
                    if not raw.endswith(b"\n"):
                        break  # a line still being written: read it whole next time
                    offset += len(raw)
                    with contextlib.suppress(ValueError):
                        yield Event.model_validate(json.loads(raw))
        if not follow:
            return
        await asyncio.sleep(FOLLOW_POLL)
