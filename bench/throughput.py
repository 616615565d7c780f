"""4. Throughput ceiling: delegations per second with an instant model (one delegation of N
children, one worker process), against raw Celery no-op tasks per second (N sent at once).

The note gives the CPU each child cost the worker process and the coordinator (this process),
read from ``/proc`` around each burst: the inputs of the pool-sizing model in docs/benchmarks.md.
"""

from __future__ import annotations

import os
import statistics

from bench.context import STEP, Bench, timed
from bench.harness import delegate_once
from bench.procs import cpu_seconds
from bench.report import Row, paired

NAME = "throughput"


async def measure(b: Bench) -> list[Row]:
    n, c = b.sizes.throughput_n, b.sizes.concurrency
    await b.stack.use_workers({"main": c})
    worker = b.stack.worker_pid("main")
    values, refs, worker_ms, coordinator_ms = [], [], [], []
    async with b.stack.engine() as engine:
        await b.step("throughput: warm-up delegation", STEP, delegate_once(engine, "one"))
        for run in range(1, b.runs + 1):
            w, me = cpu_seconds(worker), cpu_seconds(os.getpid())
            values.append(n / await b.step(f"throughput run {run}: one delegation of {n} children", STEP,
                                           timed(lambda: delegate_once(engine, "burst"))))
            worker_ms.append((cpu_seconds(worker) - w) * 1000 / n)
            coordinator_ms.append((cpu_seconds(os.getpid()) - me) * 1000 / n)
            refs.append(await b.step(f"throughput run {run}: {n} raw Celery tasks", STEP, b.raw_rate(n)))
    return [Row("4", f"throughput: {n} delegations, instant model, 1 worker × {c}", "/s", values,
                "raw Celery no-op tasks", refs, paired(values, refs), "≥ 0.5×", (">=", 0.5),
                note=f"CPU per child: worker {statistics.median(worker_ms):.2f} ms, "
                     f"coordinator {statistics.median(coordinator_ms):.2f} ms (medians)")]
