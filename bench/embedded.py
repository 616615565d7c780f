"""5. Embedded: the in-process runtime fanning out N children (200), one model call each,
against the HTTP floor measured in the same run (row 5h: the same N calls as a bare
``asyncio.gather`` through the fastest raw client, see :mod:`bench.transport`)."""

from __future__ import annotations

from bench.context import STEP, Bench, timed
from bench.harness import delegate_once
from bench.report import Row, paired
from bench.transport import floor_row, floor_step

NAME = "embedded"


async def measure(b: Bench) -> list[Row]:
    n, latency = b.sizes.embed_n, b.sizes.embed_latency
    await b.stack.use_workers({})  # nothing else competes for the CPU
    values, floors, winners = [], [], []
    async with b.stack.engine(embedded=True) as engine:
        await b.step("embedded: warm-up delegation", STEP, delegate_once(engine, "embed"))
        for run in range(1, b.runs + 1):
            values.append(await b.step(f"embedded run {run}: one delegation of {n} children", STEP,
                                       timed(lambda: delegate_once(engine, "embed"))))
            floors.append(await floor_step(b, f"embedded run {run}", b.stack.models["embed"], n, winners))
    return [floor_row("5h", n, latency, floors, winners),
            Row("5", f"embedded: {n} children × 1 call at {latency:g} s, in-process runtime", "s", values,
                "HTTP floor (5h)", floors, paired(values, floors), "≤ 1.1×", ("<=", 1.1))]
