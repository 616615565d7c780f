"""2. Fan-out: one delegation of N children (500), one model call each at 1 s latency, all on
ONE worker process (``--concurrency N``) → wall time against the ideal (the latency)."""

from __future__ import annotations

from bench.context import Bench, timed
from bench.harness import delegate_once
from bench.report import Row

NAME = "fanout"


async def measure(b: Bench) -> list[Row]:
    n, latency = b.sizes.fanout_n, b.sizes.fanout_latency
    await b.stack.use_workers({"fan": n})
    values = []
    async with b.stack.engine() as engine:
        await delegate_once(engine, "one")
        for _ in range(b.runs):
            values.append(await timed(lambda: delegate_once(engine, "fan")))
    ideal = [latency] * len(values)
    return [Row("2", f"fan-out: {n} children × 1 call at {latency:g} s, one worker process", "s", values,
                "ideal (the model latency)", ideal, [v / latency for v in values], "≤ 1.10×", ("<=", 1.10))]
