"""3. Nested: a depth-3 chain and a 10-way fan-out on a worker with ``--concurrency 1``.

The issue sets no target. The reference is what the same number of raw Celery round trips costs
one after another: a single slot runs the tree's runs serially, and each parent suspends and is
resumed (never blocks the slot), so that is the floor of a runtime built on Celery."""

from __future__ import annotations

from bench.context import STEP, Bench, timed
from bench.harness import delegate_once
from bench.report import Row, paired

NAME = "nested"
CHAIN_TASKS = 3 + 2
"""a, b, c run; a and b are resumed once each."""
FAN_TASKS = 10 + 1
"""ten leaves run; the fan-out's root is the coordinator, no resume task."""


async def measure(b: Bench) -> list[Row]:
    await b.stack.use_workers({"solo": 1})
    chain, fan, chain_ref, fan_ref = [], [], [], []
    async with b.stack.engine() as engine:
        await b.step("nested: warm-up delegation", STEP, delegate_once(engine, "one"))
        for run in range(1, b.runs + 1):
            chain.append(await b.step(f"nested run {run}: depth-3 chain", STEP,
                                      timed(lambda: delegate_once(engine, "chain"))) * 1000)
            fan.append(await b.step(f"nested run {run}: 10-way fan-out", STEP,
                                    timed(lambda: delegate_once(engine, "fan10"))) * 1000)
            rt = await b.step(f"nested run {run}: raw Celery round trips", STEP, b.raw_roundtrip(5)) * 1000
            chain_ref.append(rt * CHAIN_TASKS)
            fan_ref.append(rt * FAN_TASKS)
    return [
        Row("3a", "nested: depth-3 chain, worker `--concurrency 1`", "ms", chain,
            f"{CHAIN_TASKS} raw round trips", chain_ref, paired(chain, chain_ref)),
        Row("3b", "nested: 10-way fan-out, worker `--concurrency 1`", "ms", fan,
            f"{FAN_TASKS} raw round trips", fan_ref, paired(fan, fan_ref)),
    ]
