"""5. Embedded: the in-process runtime fanning out N children (200), one model call each,
against ``asyncio.gather`` of the same N HTTP calls with the same client library."""

from __future__ import annotations

import asyncio

import httpx2

from bench.context import Bench, timed
from bench.harness import delegate_once
from bench.report import Row, paired

NAME = "embedded"


async def measure(b: Bench) -> list[Row]:
    n, latency = b.sizes.embed_n, b.sizes.embed_latency
    await b.stack.use_workers({})  # nothing else competes for the CPU
    url = f"{b.stack.models['embed']}/v1/chat/completions"
    limits = httpx2.Limits(max_connections=1000, max_keepalive_connections=200)  # as shelly's client
    values, refs = [], []
    async with b.stack.engine(embedded=True) as engine, httpx2.AsyncClient(limits=limits, timeout=60) as client:

        async def gather() -> None:
            bodies = [{"model": "bench", "messages": [{"role": "user", "content": f"job {i}"}]} for i in range(n)]
            answers = await asyncio.gather(*(client.post(url, json=body) for body in bodies))
            for answer in answers:
                answer.raise_for_status()
                answer.json()

        await delegate_once(engine, "embed")
        await gather()
        for _ in range(b.runs):
            values.append(await timed(lambda: delegate_once(engine, "embed")))
            refs.append(await timed(gather))
    return [Row("5", f"embedded: {n} children × 1 call at {latency:g} s, in-process runtime", "s", values,
                "`asyncio.gather` of the calls", refs, paired(values, refs), "≤ 1.2×", ("<=", 1.2))]
