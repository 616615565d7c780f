"""14. Sliding window or GCRA: the provider governor's algorithm, measured on a simulated clock
(``python -m bench.algorithms``; deterministic, a second to run).

Three ways to hold a key of ``rpm`` requests a minute, each fed the same load and judged by the
strict stand-in vendor (:class:`~shelly_dist.testing.strict_limits.StrictLimits`: a sliding
minute, as the strictest vendor enforces it):

- **window**: a sliding window of the vendor's minute (plus the governor's second of margin) and
  nothing else: a batch spends a whole minute's budget at once;
- **gcra**: GCRA alone, one request per ``60/rpm`` s with a burst tolerance of a minute's budget
  (a token bucket, as the vendors document theirs);
- **governor**: what ``models/governor`` does: the window as the hard cap, batch work paced by
  GCRA (tolerance 0.5 s), interactive work first.

The load: ``N`` batch calls at t = 0 (each answered at once), and one interactive call at t = 10 s
(and again with 200 calls and the person at t = 100 s, the key saturated by then). The figures:
seconds until the batch's last call is granted, requests the strict vendor would refuse, and
seconds the interactive call waits.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools

from shelly_dist.models.governor import BATCH, INTERACTIVE, Ask, KeyLimits, MemoryGovernorStore, Settle
from shelly_dist.models.governor.base import WINDOW
from shelly_dist.testing.strict_limits import StrictLimits

T0 = 1_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def judge(grants: list[float], rpm: int) -> int:
    """Requests the strict vendor refuses when they arrive at ``grants`` (times)."""
    clock = Clock()
    vendor = StrictLimits(rpm=rpm, clock=clock)
    for at in sorted(grants):
        clock.now = at
        vendor.judge({})
    return len(vendor.rejected)


def gcra(n: int, rpm: int, person_at: float) -> tuple[float, list[float], float]:
    """GCRA alone (a token bucket of a minute's budget): every call goes when the bucket allows."""
    step, tolerance, tat, grants = 60.0 / rpm, 60.0, T0, []
    arrivals = sorted([(T0, "batch")] * n + [(T0 + person_at, "person")])
    person, done = 0.0, 0.0
    for at, who in arrivals:
        now = max(at, tat - tolerance)
        tat = max(tat, now) + step
        grants.append(now)
        if who == "person":
            person = now - at
        else:
            done = max(done, now - T0)
    return done, grants, person


def window(n: int, rpm: int, person_at: float) -> tuple[float, list[float], float]:
    """A sliding window alone (first come, first served): a call goes when the last ``WINDOW``
    seconds hold fewer than ``rpm`` grants (a per-process limiter, as Shelly's)."""
    arrivals = sorted([(T0, "batch")] * n + [(T0 + person_at, "person")])
    grants: list[float] = []
    person, done = 0.0, 0.0
    for at, who in arrivals:
        now = at if len(grants) < rpm else max(at, grants[-rpm] + WINDOW)
        grants.append(now)
        if who == "person":
            person = now - at
        else:
            done = max(done, now - T0)
    return done, grants, person


async def governed(n: int, rpm: int, person_at: float) -> tuple[float, list[float], float]:
    """The memory store on a simulated clock: every caller asks, waits what it is told, asks again."""
    clock = Clock()
    store = MemoryGovernorStore()
    limits = KeyLimits(rpm=rpm)
    seq = itertools.count()
    queue: list[tuple[float, int, str, str]] = []
    for i in range(n):
        heapq.heappush(queue, (T0, next(seq), f"b{i}", BATCH))
    heapq.heappush(queue, (T0 + person_at, next(seq), "person", INTERACTIVE))
    grants: dict[str, float] = {}
    while queue:
        at, _, rid, priority = heapq.heappop(queue)
        clock.now = at
        decision = await store.reserve(Ask(unit="u", id=rid, tokens=10, priority=priority,
                                           share="person" if rid == "person" else "batch", limits=limits), at)
        if decision.granted:
            grants[rid] = at
            await store.settle(Settle(unit="u", id=rid, estimated=10, input_tokens=10, priority=priority,
                                      limits=limits), at)
        else:
            heapq.heappush(queue, (at + decision.wait, next(seq), rid, priority))
    batch = [t for rid, t in grants.items() if rid != "person"]
    return max(batch) - T0, list(grants.values()), grants["person"] - (T0 + person_at)


def table(n: int = 80, rpm: int = 40, person_at: float = 10.0) -> str:
    rows = [("window (sliding minute only)", window(n, rpm, person_at)),
            ("gcra (token bucket of a minute)", gcra(n, rpm, person_at)),
            ("governor (window + batch paced)", asyncio.run(governed(n, rpm, person_at)))]
    out = [f"{n} batch calls at t=0 and one interactive call at t={person_at:g}s, a key of rpm {rpm} "
           f"(governor window {WINDOW:g}s):", "",
           "| algorithm | batch done after | refused by a strict vendor | interactive call waited |",
           "|---|---|---|---|"]
    for name, (done, grants, person) in rows:
        out.append(f"| {name} | {done:.1f} s | {judge(grants, rpm)} | {person:.1f} s |")
    return "\n".join(out)


if __name__ == "__main__":
    print(table())
    print()
    print(table(200, 40, 100.0))  # the key saturated when the person asks
