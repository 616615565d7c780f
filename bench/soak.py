"""``python -m bench.soak [--runs 10000] [--in-flight 64] [--concurrency 32]``: a long-lived
worker's memory under a distributed batch.

Every run is a root run on the pool in a session of its own, as ``shelly batch`` makes them, and
writes the session's blackboard (so the worker builds a registry and a store handle per
session). One ``shelly worker`` process takes them all. Its RSS is sampled every few seconds;
the report gives runs/s and RSS at start (after a warm-up), end and peak, and the samples.
``--sessions N`` sets the worker's session cache (``SHELLY_WORKER_SESSIONS``), e.g. a huge value
to see the unbounded growth the cache prevents. Processes are reaped and keys deleted on the way
out, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from dataclasses import dataclass, field
from types import FrameType

from bench.harness import BenchError, Stack
from bench.procs import rss_bytes
from shelly_dist.engine.sessions import new_session_id

MB = 1024 * 1024
WARMUP = 200
"""Runs before the start RSS is read: imports, pools and caches reach their working size."""
SAMPLE_EVERY = 5.0


@dataclass
class Samples:
    """(seconds since start, runs done, RSS MB) every :data:`SAMPLE_EVERY` seconds."""

    points: list[tuple[float, int, float]] = field(default_factory=list)


def soak_team() -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    script = {"noter": [{"tool_calls": [{"name": "shared_state_set", "arguments": {"key": "seen", "value": 1}}]},
                        "noted {task}"]}
    providers = [{"name": "script", "kind": "scripted", "model": "script", "script": script}]
    return providers, [{"name": "noter", "provider": "script", "toolboxes": ["state"]}]


async def soak(stack: Stack, runs: int, in_flight: int, concurrency: int) -> str:
    stack.write_config(*soak_team())
    await stack.use_workers({"soak": concurrency})
    pid = stack.worker_pid("soak")
    done = 0
    failed: list[str] = []
    async with stack.engine() as engine:
        runtime = engine.runtime

        async def one(i: int) -> None:
            nonlocal done
            run_id = await runtime.submit("noter", f"item {i}", session=new_session_id())  # type: ignore[attr-defined]
            record = await runtime.wait(run_id)  # type: ignore[attr-defined]
            if record.status != "done":  # a RunRecord (CeleryRuntime.wait is typed since issue 21)
                failed.append(f"{run_id}: {record.status} {record.error}")
            done += 1

        async def batch(start: int, stop: int) -> None:
            limit = asyncio.Semaphore(in_flight)

            async def bounded(i: int) -> None:
                async with limit:
                    await one(i)

            await asyncio.gather(*(bounded(i) for i in range(start, stop)))

        await batch(0, WARMUP)
        samples = Samples()
        started = time.monotonic()
        start_rss = rss_bytes(pid) / MB

        async def sample() -> None:
            while True:
                samples.points.append((time.monotonic() - started, done - WARMUP, rss_bytes(pid) / MB))
                await asyncio.sleep(SAMPLE_EVERY)

        sampler = asyncio.create_task(sample())
        try:
            await batch(WARMUP, WARMUP + runs)
        finally:
            sampler.cancel()
        elapsed = time.monotonic() - started
        end_rss = rss_bytes(pid) / MB
    if failed:
        raise BenchError(f"bench: {len(failed)} soak runs did not finish: {failed[:5]}")
    peak = max([end_rss, *(p[2] for p in samples.points)])
    lines = [
        f"soak: {runs} runs (each its own session) through one worker (`--concurrency {concurrency}`), "
        f"{in_flight} in flight, after {WARMUP} warm-up runs",
        f"  {runs / elapsed:.1f} runs/s over {elapsed:.0f} s",
        f"  worker RSS: start {start_rss:.1f} MB, end {end_rss:.1f} MB, peak {peak:.1f} MB "
        f"(end - start {end_rss - start_rss:+.1f} MB)",
        "  samples (s, runs, RSS MB): " + ", ".join(f"({t:.0f}, {n}, {r:.1f})" for t, n, r in samples.points),
    ]
    return "\n".join(lines)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


async def run(args: argparse.Namespace) -> str:
    stack = Stack()
    if args.sessions:
        stack.env["SHELLY_WORKER_SESSIONS"] = str(args.sessions)
    try:
        return await soak(stack, args.runs, args.in_flight, args.concurrency)
    finally:
        await asyncio.to_thread(stack.close)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000, help="runs after the warm-up (default 10000)")
    parser.add_argument("--in-flight", type=int, default=64, help="runs submitted and not ended at a time")
    parser.add_argument("--concurrency", type=int, default=32, help="the worker's --concurrency")
    parser.add_argument("--sessions", type=int, default=0, help="the worker's session cache size (default: its own)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        print(asyncio.run(run(args)))
    except KeyboardInterrupt:
        print("bench.soak: interrupted; processes reaped, keys deleted", file=sys.stderr)
        return 130
    except BenchError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
