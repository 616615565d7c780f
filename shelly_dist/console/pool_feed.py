"""The pool's event streams as the console serves them: one session's, exactly resumable, and
every session's at once.

A session's stream (``…:s:{session}:events``) holds one entry per step, each a batch of events.
An event's id is ``<entry id>:<index>``: resuming after it reads that entry again and skips the
events up to the index, so a reader that dropped in the middle of a batch misses nothing and gets
nothing twice.

Every session's feed follows the streams of the :data:`FOLLOWED` sessions started last (the
index of sessions with runs, re-read every :data:`REFRESH` seconds; a session that appears is read
from its first event). An event's id there is ``<entry id>:<index>@<session>``. The streams share
no order, so its resume is by time: after ``T-n:i@S`` it reads ``S`` exactly as above and every
other stream from the millisecond ``T`` on — an event of another session written in that same
millisecond may come twice, none is lost (a client that must not see one twice drops ids it has).
On one Redis the streams are read with one blocking ``XREAD``; a cluster cannot read streams of
several slots in one command, so there they are read in one pipeline every :data:`POLL` seconds.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

from shelly_dist.cancellation import pause
from shelly_dist.errors import UsageError
from shelly_dist.events import Event
from shelly_dist.redisio.blocking import read_through
from shelly_dist.redisio.connection import is_cluster, redis_errors
from shelly_dist.redisio.keys import Keys

FOLLOWED = 200
"""Sessions the feed of every session follows: the most recently started."""
REFRESH = 2.0
"""Seconds between two reads of the session index by the feed of every session."""
POLL = 0.5
"""Seconds between two reads of a cluster's streams when the last read found nothing."""
BLOCK_MS = 1000
"""How long one blocking read waits for a new entry before the feed looks at the index again."""

_ENTRY = re.compile(r"^(\d+)-(\d+)$")
_MAX_SEQ = 2**64 - 1


def _entry(entry_id: str) -> tuple[int, int]:
    found = _ENTRY.match(entry_id)
    if found is None:
        raise UsageError(f"serve: Last-Event-ID: {entry_id!r} is not an event id of this server")
    return int(found[1]), int(found[2])


def before(entry_id: str) -> str:
    """The stream id just before ``entry_id`` (reading after it reads ``entry_id`` itself)."""
    ms, seq = _entry(entry_id)
    if seq:
        return f"{ms}-{seq - 1}"
    return f"{ms - 1}-{_MAX_SEQ}" if ms else "0-0"


def stream_position(after: str | None) -> tuple[str, int]:
    """``(entry id, index)`` of a session event id (``None``: before the first event, ``("0-0", -1)``)."""
    if not after:
        return "0-0", -1
    entry, sep, index = after.partition(":")
    _entry(entry)
    if not sep or not index.isdigit():
        raise UsageError(f"serve: Last-Event-ID: {after!r} is not an event id of this server")
    return entry, int(index)


def _events(fields: dict[str, str]) -> list[Event]:
    return [Event.model_validate(raw) for raw in json.loads(fields.get("events", "[]"))]


async def stream_after(
    client: Any, keys: Keys, session: str, entry: str, skip: int, *, block_ms: int = BLOCK_MS
) -> AsyncIterator[tuple[str, Event]]:
    """``(id, event)`` of ``session`` after event ``<entry>:<skip>`` (``skip`` -1: after ``entry``
    itself), following new ones until the caller stops."""
    from shelly_dist.runtime.celery.client.events import read_entries

    start = before(entry) if skip >= 0 else entry
    async for entry_id, batch in read_entries(client, keys, session, after=start, follow=True, block_ms=block_ms):
        for i, event in enumerate(batch):
            if entry_id == entry and i <= skip:
                continue
            yield f"{entry_id}:{i}", event


def global_position(after: str | None) -> tuple[str, int, str]:
    """``(entry id, index, session)`` of an id of the feed of every session (``None``: none)."""
    if not after:
        return "", -1, ""
    event_id, sep, session = after.partition("@")
    entry, index = stream_position(event_id)
    if not sep or not session:
        raise UsageError(f"serve: Last-Event-ID: {after!r} is not an event id of this server's feed")
    return entry, index, session


async def every_session(client: Any, keys: Keys, after: str | None) -> AsyncIterator[tuple[str, Event]]:
    """``(id, event)`` of every followed session from ``after`` (``None``: from now on)."""
    entry, skip, named = global_position(after)
    start_ms = _entry(entry)[0] if after else await _now_ms(client)
    since = before(f"{start_ms}-0")
    positions: dict[str, str] = {}
    refreshed, placed = 0.0, False
    while True:
        if time.monotonic() - refreshed >= REFRESH:
            positions = await _followed(client, keys, positions, start_ms, since)
            if named in positions and not placed:  # the resumed session: exactly after its event
                positions[named], placed = (before(entry) if skip >= 0 else entry), True
            refreshed = time.monotonic()
        found = await _read(client, keys, positions)
        for session, entry_id, fields in found:
            positions[session] = entry_id
            for i, event in enumerate(_events(fields)):
                if session == named and entry_id == entry and i <= skip:
                    continue
                yield f"{entry_id}:{i}@{session}", event
        if not found and (is_cluster(client) or not positions):
            await pause(POLL)


async def _now_ms(client: Any) -> int:
    """Redis's clock in milliseconds (the streams' ids are made from it); a cluster's nodes each
    have one, so there this process's clock stands in."""
    if is_cluster(client):
        return int(time.time() * 1000)
    with redis_errors("serve"):
        seconds, micros = await read_through("serve", client.time)
    return int(seconds) * 1000 + int(micros) // 1000


async def _followed(client: Any, keys: Keys, positions: dict[str, str], start_ms: int, since: str) -> dict[str, str]:
    """The sessions to follow now, each at its position: kept, or for one not followed yet its
    first entry when it started after the feed's start, else the feed's start."""
    with redis_errors("serve"):
        scored = await read_through("serve", lambda: client.zrevrange(keys.run_sessions(), 0, FOLLOWED - 1,
                                                                      withscores=True))
    return {s: positions.get(s) or ("0-0" if score * 1000 >= start_ms else since) for s, score in scored}


async def _read(client: Any, keys: Keys, positions: dict[str, str]) -> list[tuple[str, str, dict[str, str]]]:
    """``(session, entry id, fields)`` of the entries after each position, in stream id order:
    one blocking ``XREAD`` on one Redis, one pipeline of them on a cluster."""
    if not positions:
        return []
    session_of = {keys.events(s): s for s in positions}
    streams = {keys.events(s): p for s, p in positions.items()}

    async def read() -> list[Any]:
        if not is_cluster(client):
            return list(await client.xread(streams, count=500, block=BLOCK_MS) or [])
        async with client.pipeline(transaction=False) as pipe:
            for key, position in streams.items():
                pipe.xread({key: position}, count=500)
            return [stream for answer in await pipe.execute() for stream in answer or []]

    with redis_errors("serve"):
        answer = await read_through("serve", read)
    found = [(session_of[key], entry_id, fields) for key, entries in answer for entry_id, fields in entries]
    return sorted(found, key=lambda f: _entry(f[1]))
