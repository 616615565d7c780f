"""Calls made in one turn of the event loop, handled together in one round trip.

A fan-out sends its children's tasks and records their sends with ``asyncio.gather`` (one call per
child, each with its own result); a :class:`TurnBatch` collects the calls that reach it before the
loop's next turn and hands them to one handler call: one ``LPUSH`` for the tasks
(``fast_send``), one pipeline for the ``SENT`` scripts (``journal``). Concurrent calls each on a
connection of their own would instead open as many connections as the fan-out has children.
A :class:`TurnPipeline` does the same for any commands: on a Redis Cluster, the writes of many
concurrent runs to keys outside their trees' slots (hints, events, instance counters) go in one
pipeline per turn instead of one round trip each.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

from redis.exceptions import NoScriptError

from shelly_dist.redisio.per_client import PerClient

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


Queue = Callable[[Any], None]
"""Queues one caller's commands into a pipeline (``pipe.zadd(...)``, ``pipe.incr(...)``, …)."""


class TurnPipeline:
    """``await pipelined(queue)``: the results of the commands ``queue`` put into a pipeline, sent
    with every other caller's of the same loop turn in one non-transactional pipeline — on a Redis
    Cluster one round trip per node the turn's commands reach, instead of one per caller.

    For the cluster path's writes to keys outside a tree's slot, made by many concurrent runs of
    one worker at once (the due index's hints, the session streams' events, the instance counters):
    each caller still awaits its own commands' answers, so what it orders before or after its own
    other writes stays ordered (a script's hint before it completes before it). Callers' commands
    are sent in arrival order; one caller's error (``ResponseError``) is raised to that caller
    only, a connection's to every caller of the turn. (Holding a turn's calls while the previous
    pipeline is in flight made larger pipelines, 1.7–2.3 socket reads a child instead of 3.6, but
    waiting behind a cluster pipeline's client-side cost halved a busy worker's throughput.)"""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._batch: TurnBatch[Queue, list[Any]] = TurnBatch(self._send)

    async def __call__(self, queue: Queue) -> list[Any]:
        results = await self._batch(queue)
        for result in results:
            if isinstance(result, Exception):
                raise result
        return results

    async def script(self, script: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run a registered script (``EVALSHA``) in the turn's pipeline; one not loaded in its
        node yet (``NOSCRIPT``) is run on its own, which loads it."""
        try:
            # EVALSHA by name: a cluster pipeline blocks its ``evalsha`` method (redis-py 8.1), not
            # the command, which it routes by its keys' slot
            return (await self(lambda pipe: pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)))[0]
        except NoScriptError:
            return await script(keys=list(keys), args=list(args))

    async def _send(self, queues: list[Queue]) -> list[list[Any]]:
        async with self.client.pipeline(transaction=False) as pipe:
            bounds = [0]
            for queue in queues:
                queue(pipe)
                bounds.append(len(pipe))
            results = await pipe.execute(raise_on_error=False)
        return [results[start:end] for start, end in itertools.pairwise(bounds)]


turn_pipeline: PerClient[TurnPipeline] = PerClient(TurnPipeline)
"""``turn_pipeline(client)``: the one :class:`TurnPipeline` of ``client`` (every user of the client
shares its turns)."""
