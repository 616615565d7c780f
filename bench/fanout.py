"""2. Fan-out: one delegation of N children (500), one model call each at 1 s latency, all on
ONE worker process (``--concurrency N``) → wall time against the HTTP floor measured in the same
run (row 2h: the same N calls as a bare ``asyncio.gather`` through the fastest raw client, see
:mod:`bench.transport`)."""

from __future__ import annotations

from bench.context import STEP, Bench, timed
from bench.harness import delegate_once
from bench.report import Row, paired
from bench.transport import floor_row, floor_step

NAME = "fanout"


async def measure(b: Bench) -> list[Row]:
    n, latency = b.sizes.fanout_n, b.sizes.fanout_latency
    await b.stack.use_workers({"fan": n})
    values, floors, winners = [], [], []
    async with b.stack.engine() as engine:
        await b.step("fan-out: warm-up delegation", STEP, delegate_once(engine, "one"))
        for run in range(1, b.runs + 1):
            values.append(await b.step(f"fan-out run {run}: one delegation of {n} children", STEP,
                                       timed(lambda: delegate_once(engine, "fan"))))
            floors.append(await floor_step(b, f"fan-out run {run}", b.stack.models["slow"], n, winners))
    ideal = ", ".join(f"{v / latency:.2f}" for v in values)
    return [floor_row("2h", n, latency, floors, winners),
            Row("2", f"fan-out: {n} children × 1 call at {latency:g} s, one worker process", "s", values,
                "HTTP floor (2h)", floors, paired(values, floors), "≤ 1.5×", ("<=", 1.5),
                note=f"against the ideal {latency:g} s: {ideal}× per run")]
