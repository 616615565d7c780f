"""6. Redis commands per delegation.

``INFO commandstats`` is server-wide: on a shared Redis it counts everybody's traffic. So the
bench watches ``MONITOR`` instead and keeps the commands that are this bench's: those on the
broker's database (:data:`~bench.harness.BROKER_DB`, used by nothing else) and those naming this
stack's key prefix. Idle traffic (workers polling the queue, heartbeats) is measured for as long
with nothing running and subtracted. Every command counts — broker, journal, join, events,
pub/sub, coordinator and worker alike.

Two counts: commands *sent* by clients (a Lua script is one ``EVALSHA``; each pipelined command
counts), and commands *executed*, which adds the commands inside the scripts. The figure is the
marginal cost of one more child — (a delegation of 10 children − a delegation of 1) / 9 — since a
whole top-level run also pays for its own root record and event stream; the whole one-child run
is in the note. The reference is a raw Celery ``delay().get()`` counted the same way.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from bench.cluster import refuse_cluster
from bench.context import STEP, Bench, timed
from bench.harness import BROKER_DB, REDIS_URL, delegate_once
from bench.procs import BenchError
from bench.report import Row, paired

NAME = "commands"
SETTLE = 0.2
"""Seconds to keep counting after the action, so its last commands land before the marker."""
CATCH_UP = 20.0
"""Seconds the ``MONITOR`` reader may take to reach the stop marker (it reads the whole shared
server's traffic, so it can lag); past that the count would be short, and the step fails."""


@dataclass
class Count:
    sent: float = 0.0
    executed: float = 0.0
    seconds: float = 0.0
    by_command: Counter[str] = field(default_factory=Counter)

    def minus_idle(self, idle: Count, per: int) -> Count:
        scale = self.seconds / idle.seconds if idle.seconds else 0.0
        return Count(max(0.0, self.sent - idle.sent * scale) / per,
                     max(0.0, self.executed - idle.executed * scale) / per, self.seconds, self.by_command)


class Monitor:
    """Counts this bench's commands (see the module docstring) until stopped."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.count = Count()
        self._marker = f"bench-stop-{id(self)}"
        self._client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self._client.monitor() as m:
            self._ready.set()
            for cmd in m.listen():
                text = cmd.get("command", "")
                if self._marker in text:
                    return
                if cmd.get("db") == BROKER_DB or self.prefix in text:
                    self.count.executed += 1
                    if cmd.get("client_type") != "lua":
                        self.count.sent += 1
                        self.count.by_command[text.split(" ", 1)[0].upper()] += 1

    def __enter__(self) -> Monitor:
        self._thread.start()
        if not self._ready.wait(10):
            raise BenchError("bench: commands: MONITOR did not start within 10 s")
        return self

    def __exit__(self, *_: object) -> None:
        marker = redis.Redis.from_url(REDIS_URL)
        marker.echo(self._marker)
        marker.close()
        self._thread.join(CATCH_UP)
        lagging = self._thread.is_alive()
        self._client.close()
        if lagging:
            raise BenchError(f"bench: commands: the MONITOR reader did not reach its stop marker in {CATCH_UP:g}s "
                             "(the count would be short)")


async def count(prefix: str, action: Callable[[], Awaitable[Any]]) -> Count:
    """The commands of this bench while ``action`` runs (plus :data:`SETTLE`)."""
    mon = Monitor(prefix)
    await asyncio.to_thread(mon.__enter__)
    try:
        seconds = await timed(action)
        await asyncio.sleep(SETTLE)
    finally:
        await asyncio.to_thread(mon.__exit__)
    mon.count.seconds = seconds + SETTLE
    return mon.count


def refuse_broker_apart(broker_url: str) -> None:
    """``BenchError`` at once when the broker is another server than the journals' Redis: the
    ``MONITOR`` of one server would miss every broker command (and count 0 for raw Celery)."""
    journals, broker = redis.Redis.from_url(REDIS_URL), redis.Redis.from_url(broker_url)
    try:
        apart = journals.info("server")["run_id"] != broker.info("server")["run_id"]
    finally:
        journals.close()
        broker.close()
    if apart:
        raise BenchError(f"bench: {NAME}: cannot run with the broker on a Redis of its own ({broker_url}): it "
                         "counts every command of a delegation, the broker's included, with MONITOR of the "
                         "journals' server; unset BENCH_BROKER_URL for this row")


async def measure(b: Bench) -> list[Row]:
    refuse_cluster(REDIS_URL, NAME, "it counts the bench's commands with MONITOR of one server")
    refuse_broker_apart(b.stack.broker_url)
    k = b.sizes.commands_k
    await b.stack.use_workers({"main": b.sizes.concurrency})
    values, refs, executed, whole = [], [], [], []
    busiest = Counter[str]()
    async with b.stack.engine() as engine:
        await b.step("commands: warm-up delegation", STEP, delegate_once(engine, "one"))
        await b.step("commands: warm-up raw round trip", STEP, b.raw_roundtrip(1))

        def sends(agent: str) -> Callable[[], Awaitable[None]]:
            async def go() -> None:
                for _ in range(k):
                    await delegate_once(engine, agent)

            return go

        def counted(run: int, what: str, action: Callable[[], Awaitable[Any]]) -> Awaitable[Count]:
            return b.step(f"commands run {run}: counting {what}", STEP + CATCH_UP, count(b.stack.prefix, action))

        for run in range(1, b.runs + 1):
            idle = await counted(run, "idle traffic for 1 s", lambda: asyncio.sleep(1.0))
            one = (await counted(run, f"{k} one-child delegations", sends("one"))).minus_idle(idle, k)
            ten = (await counted(run, f"{k} ten-child delegations", sends("ten"))).minus_idle(idle, k)
            raw = (await counted(run, f"{k} raw round trips", lambda: b.raw_roundtrip(k))).minus_idle(idle, k)
            values.append((ten.sent - one.sent) / 9)
            executed.append((ten.executed - one.executed) / 9)
            whole.append(one.sent)
            refs.append(raw.sent)
            if one.by_command.total() > busiest.total():
                busiest = one.by_command
    top = ", ".join(f"{c} {n / k:.1f}" for c, n in busiest.most_common(8))
    med = sorted(executed)[len(executed) // 2]
    med_whole = sorted(whole)[len(whole) // 2]
    return [Row("6", "Redis commands per delegation (sent by all processes, broker included)", "", values,
                "raw Celery `delay().get()`", refs, paired(values, refs), "≤ 20", ("<=", 20.0), on="value",
                note=f"marginal cost of one more child; {med:.0f} executed incl. inside Lua scripts. "
                     f"A whole one-child run sends {med_whole:.0f}: {top}")]
