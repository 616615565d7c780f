"""Calls made in one turn of the event loop, handled together in one round trip.

A fan-out sends its children's tasks and records their sends with ``asyncio.gather`` (one call per
child, each with its own result); a :class:`TurnBatch` collects the calls that reach it before the
loop's next turn and hands them to one handler call: one ``LPUSH`` for the tasks
(``fast_send``), one pipeline for the ``SENT`` scripts (``journal``). Concurrent calls each on a
connection of their own would instead open as many connections as the fan-out has children.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class TurnBatch(Generic[T, R]):
    """``await batch(item)``: ``item``'s result from ``handle(items)``, called once per loop turn
    with every item that arrived in it, in arrival order; ``handle`` returns one result per item.
    An exception of ``handle`` is raised to every caller of that batch."""

    def __init__(self, handle: Callable[[list[T]], Awaitable[list[R]]]) -> None:
        self._handle = handle
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._running: set[asyncio.Task[None]] = set()

    async def __call__(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        result: asyncio.Future[R] = loop.create_future()
        if not self._pending:  # the first of this turn: handle once the turn's other calls are in
            loop.call_soon(self._start)
        self._pending.append((item, result))
        return await result

    def _start(self) -> None:
        batch, self._pending = self._pending, []
        task = asyncio.ensure_future(self._run(batch))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            results = await self._handle([item for item, _ in batch])
        except Exception as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        except BaseException:  # cancelled (the loop is closing): so are the calls waiting on it
            for _, future in batch:
                future.cancel()
            raise
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)

    async def drain(self) -> None:
        """Wait for the batches under way (before closing what their handler uses)."""
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
