"""4. Throughput ceiling: delegations per second with an instant model (one delegation of N
children, one worker process), against raw Celery no-op tasks per second (N sent at once)."""

from __future__ import annotations

from bench.context import Bench, timed
from bench.harness import delegate_once
from bench.report import Row, paired

NAME = "throughput"


async def measure(b: Bench) -> list[Row]:
    n, c = b.sizes.throughput_n, b.sizes.concurrency
    await b.stack.use_workers({"main": c})
    values, refs = [], []
    async with b.stack.engine() as engine:
        await delegate_once(engine, "one")
        for _ in range(b.runs):
            values.append(n / await timed(lambda: delegate_once(engine, "burst")))
            refs.append(await b.raw_rate(n))
    return [Row("4", f"throughput: {n} delegations, instant model, 1 worker × {c}", "/s", values,
                "raw Celery no-op tasks", refs, paired(values, refs), "≥ 0.5×", (">=", 0.5))]
