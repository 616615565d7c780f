"""7. Worker memory: RSS of one worker process at rest and with N runs (500) in flight.

The children's model holds every call until released, so "in flight" is exact: the RSS is read
once the model has N calls waiting, then the calls are released and the run completes. At rest
is read after a warm-up delegation, before the first in-flight round.
"""

from __future__ import annotations

import asyncio
import sys
import time

from bench.context import STEP, Bench
from bench.harness import delegate_once, wait_for
from bench.procs import rss_bytes
from bench.report import Row

NAME = "memory"
MB = 1024 * 1024


async def measure(b: Bench) -> list[Row]:
    n = b.sizes.memory_n
    await b.stack.use_workers({"fan": b.sizes.fanout_n})
    pid = b.stack.worker_pid("fan")
    values, rest = [], []
    async with b.stack.engine() as engine:
        await b.step("memory: warm-up delegation", STEP, delegate_once(engine, "one"))
        rest_once = rss_bytes(pid) / MB
        for i in range(1, b.runs + 1):
            rest.append(rss_bytes(pid) / MB)
            before = (await b.stack.model_stats("hold"))["requests"]
            run = asyncio.create_task(delegate_once(engine, "hold"))
            try:

                async def all_in_flight(before: int = before) -> bool:
                    stats = await b.stack.model_stats("hold")
                    return stats["requests"] - before >= n and stats["inflight"] >= n

                start = time.monotonic()
                await wait_for(all_in_flight, STEP, f"memory run {i}: {n} model calls in flight", interval=0.1)
                print(f"bench: memory run {i}: {n} calls in flight after {time.monotonic() - start:.1f}s",
                      file=sys.stderr, flush=True)
                values.append(rss_bytes(pid) / MB)
            finally:
                await b.stack.model_stats("hold", "release")
            await b.step(f"memory run {i}: the released delegation finishing", STEP, run)
    per = (sorted(values)[len(values) // 2] - rest_once) * 1024 / n  # later "rest" keeps earlier rounds' heap
    return [Row("7", f"worker RSS with {n} runs in flight (one process, `--concurrency {b.sizes.fanout_n}`)",
                "MB", values, "RSS at rest", rest, [v / r for v, r in zip(values, rest, strict=True)],
                "≤ 150 MB", ("<=", 150.0), on="value",
                note=f"at rest after one warm-up {rest_once:.0f} MB; ≈ {per:.0f} KB per in-flight run")]
