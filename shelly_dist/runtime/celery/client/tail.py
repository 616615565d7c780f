"""The live view's tail of a top-level run: the remote tree's events, read from the session stream.

The coordinator runs the root in its own process and its children on the pool; their events reach
Redis, not the caller's sink. A :class:`Tail` forwards them back, so the live view shows the whole
tree, and catches up before the root sees its children's entries, so the view prints in causal order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

import redis.asyncio as aioredis

from shelly_dist.events import Event, EventSink
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.client.events import last_id, not_before, read_entries

logger = logging.getLogger(__name__)

DRAIN_LIMIT = 30.0
"""Seconds the live view's tail may take, once the run has ended, to read the rest of the stream
(normally milliseconds; the bound only matters if Redis goes away at that moment)."""

LIVE_INTERVAL = 0.1
"""Seconds between reads of the remote events for the live view: ten refreshes a second at most,
and one read per burst of events instead of one per event."""


class Tail:
    """Forwards the session stream's events of *other* runs (the remote tree) to the live view.

    It reads from just before the root started. :meth:`close` with ``drain`` stops the follower and
    reads on at once up to the stream's newest entry at that moment — every child has joined by the time the root
    finishes, and a run's events are written with its finish, so that entry covers every child —
    and only then stops: a child that finished in the last instant still gets its lines (issue 13).
    A tail that cannot drain (Redis gone at the end) stops after :data:`DRAIN_LIMIT` seconds.
    """

    def __init__(self, client: aioredis.Redis, keys: Keys, session: str, run_id: str, sink: EventSink) -> None:
        self._client = client
        self._keys = keys
        self._session = session
        self._run_id = run_id
        self._sink = sink
        self._last = f"{int(time.time() * 1000) - 1}-0"
        self._task = asyncio.create_task(self._forward())

    async def _forward(self) -> None:
        await self._pass(read_entries(self._client, self._keys, self._session, after=self._last,
                                      follow=True, block_ms=500, batch_interval=LIVE_INTERVAL))

    async def _pass(self, entries: AsyncIterator[tuple[str, list[Event]]], until: str | None = None) -> None:
        """Forward the events of other runs from ``entries``, moving :attr:`_last` past each entry
        once forwarded (an entry :meth:`catch_up` forwarded already is skipped: each is forwarded
        once, with no await between the check and the move); stop after the entry at or past
        ``until`` (when given)."""
        async for entry_id, batch in entries:
            if not not_before(self._last, entry_id):
                for event in batch:
                    if event.run_id != self._run_id:
                        self._sink(event)
                self._last = entry_id
            if until is not None and not_before(entry_id, until):
                return

    async def catch_up(self) -> None:
        """Forward every entry written so far, at once, beside the paced follower (which skips
        what this forwarded). Bounded like the drain: a Redis gone at this moment costs the view
        lines, never the run."""
        await self._drain()

    async def close(self, *, drain: bool) -> None:
        """Stop forwarding; with ``drain``, after forwarding everything written so far."""
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        if drain:
            await self._drain()

    async def _drain(self) -> None:
        """Read the rest of the stream, up to its newest entry now, at once (no follower pacing).

        It moves :attr:`_last` only after forwarding an entry, and the follower (stopped first at
        the end; still running for :meth:`catch_up`) skips what is behind it, so reading on from
        :attr:`_last` neither skips nor repeats one. Waiting for the paced
        follower instead cost every top-level run up to two :data:`LIVE_INTERVAL` pauses (≈ 200 ms per
        run in ``python -m bench``'s delegation overhead, issue 16).
        """
        try:
            async with asyncio.timeout(DRAIN_LIMIT):
                target = await last_id(self._client, self._keys, self._session)
                if target is None or not_before(self._last, target):
                    return
                await self._pass(read_entries(self._client, self._keys, self._session, after=self._last), target)
        except TimeoutError:
            logger.warning("coordinator: the event stream was not read to its end within %.0fs", DRAIN_LIMIT)
        except Exception as exc:
            logger.warning("coordinator: cannot read the event stream's end (%s); the view may miss events", exc)
