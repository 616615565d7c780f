"""1. Delegation overhead: coordinator → one child whose model answers at once → result,
against a raw Celery no-op ``delay().get()`` on the same Redis."""

from __future__ import annotations

from bench.context import STEP, Bench, timed
from bench.harness import delegate_once
from bench.report import Row, paired

NAME = "overhead"


async def measure(b: Bench) -> list[Row]:
    await b.stack.use_workers({"main": b.sizes.concurrency})
    n = b.sizes.overhead_reps
    values, refs = [], []
    async with b.stack.engine() as engine:
        await b.step("overhead: warm-up delegation", STEP, delegate_once(engine, "one"))  # worker loop, pool

        async def many() -> None:
            for _ in range(n):
                await delegate_once(engine, "one")

        for run in range(1, b.runs + 1):
            values.append(await b.step(f"overhead run {run}: {n} delegations", STEP, timed(many)) / n * 1000)
            refs.append(await b.step(f"overhead run {run}: {n} raw round trips", STEP, b.raw_roundtrip(n)) * 1000)
    return [Row("1", "delegation overhead (one child, instant model)", "ms", values,
                "raw Celery `delay().get()`", refs, paired(values, refs), "≤ 2×", ("<=", 2.0),
                note=f"mean of {n} sequential delegations per run")]
