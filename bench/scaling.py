"""8. Scaling: 1, 2 and 4 worker processes against a 50 ms model.

Each run is one delegation of N children (200); the figure is delegations per second, and the
reference is the one-worker rate measured in the same invocation. Workers are added, never
restarted, between the steps. The machine's core count bounds what more processes can give; the
note gives the CPU the worker processes spent per child, all of them together (from ``/proc``).
"""

from __future__ import annotations

import statistics

from bench.context import STEP, Bench, timed
from bench.harness import delegate_once
from bench.procs import cpu_seconds
from bench.report import Row

NAME = "scaling"
KEYS = {1: "8a", 2: "8b", 4: "8c"}


async def measure(b: Bench) -> list[Row]:
    n, c = b.sizes.scaling_n, b.sizes.concurrency
    rates: dict[int, list[float]] = {}
    cpu: dict[int, list[float]] = {}
    async with b.stack.engine() as engine:
        for k in b.sizes.scaling_workers:
            await b.stack.use_workers({f"scale{i}": c for i in range(k)})
            pids = [b.stack.worker_pid(f"scale{i}") for i in range(k)]
            await b.step(f"scaling × {k}: warm-up delegation", STEP, delegate_once(engine, "one"))
            rates[k], cpu[k] = [], []
            for run in range(1, b.runs + 1):
                before = sum(map(cpu_seconds, pids))
                rates[k].append(n / await b.step(f"scaling × {k} run {run}: one delegation of {n} children", STEP,
                                                 timed(lambda: delegate_once(engine, "scale"))))
                cpu[k].append((sum(map(cpu_seconds, pids)) - before) * 1000 / n)
    base = rates[b.sizes.scaling_workers[0]]
    one = statistics.median(base)
    return [
        Row(KEYS.get(k, f"8-{k}"), f"scaling: {k} worker process{'es' if k > 1 else ''} × {c}, "
            f"{n} children at {b.sizes.scaling_latency * 1000:g} ms", "/s", r,
            "1 worker", base, [x / one for x in r],
            note=f"workers' CPU per child {statistics.median(cpu[k]):.2f} ms")
        for k, r in rates.items()
    ]
