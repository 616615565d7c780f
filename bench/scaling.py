"""8. Scaling: 1, 2 and 4 worker processes against a 50 ms model.

Each run is one delegation of N children (200); the figure is delegations per second, and the
reference is the one-worker rate measured in the same invocation. Workers are added, never
restarted, between the steps. The machine's core count bounds what more processes can give.
"""

from __future__ import annotations

import statistics

from bench.context import Bench, timed
from bench.harness import delegate_once
from bench.report import Row

NAME = "scaling"
KEYS = {1: "8a", 2: "8b", 4: "8c"}


async def measure(b: Bench) -> list[Row]:
    n, c = b.sizes.scaling_n, b.sizes.concurrency
    rates: dict[int, list[float]] = {}
    async with b.stack.engine() as engine:
        for k in b.sizes.scaling_workers:
            await b.stack.use_workers({f"scale{i}": c for i in range(k)})
            await delegate_once(engine, "one")
            rates[k] = [n / await timed(lambda: delegate_once(engine, "scale")) for _ in range(b.runs)]
    base = rates[b.sizes.scaling_workers[0]]
    one = statistics.median(base)
    return [
        Row(KEYS.get(k, f"8-{k}"), f"scaling: {k} worker process{'es' if k > 1 else ''} × {c}, "
            f"{n} children at {b.sizes.scaling_latency * 1000:g} ms", "/s", r,
            "1 worker", base, [x / one for x in r])
        for k, r in rates.items()
    ]
