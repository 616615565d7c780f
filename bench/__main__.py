"""``python -m bench [--quick] [--only NAME] [--runs 5] [--workers 1,2,4] [--write]``: run, print the table.

Further options: ``--profile DIR``, ``--scale N``.

``--workers`` sets the worker process counts of the scaling row (default 1,2,4); its top-level
runs are submitted to the pool, as ``shelly batch`` does (``--roots coordinator``: driven by the
bench process instead, one coordinator process for all of them, which then caps the pool first). ``--scale N``
runs only the idle-pool scenario (:mod:`bench.idle`: the Redis load of N live idle trees), once
per worker count of ``--workers`` (default 8).

Starts what it needs (model servers, workers, the raw Celery reference), measures, prints a
markdown table with a description of the machine, and with ``--write`` replaces the results
section of ``docs/benchmarks.md`` (between its ``bench:results`` markers; the analysis around
them is kept). ``--profile DIR`` samples the bench process and every worker (:mod:`bench.sampler`)
and leaves one collapsed-stacks file per process in DIR. Every process is reaped and every key
deleted on the way out, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from bench import (
    batch,
    commands,
    embedded,
    fanout,
    idle,
    memory,
    nested,
    overhead,
    provider_batches,
    recovery,
    scaling,
    throughput,
)
from bench.context import STEP, Bench
from bench.harness import REDIS_URL, BenchError, Stack
from bench.machine import describe
from bench.report import Row, table
from bench.sampler import Sampler, top
from bench.team import FULL, QUICK, config

SCENARIOS = {m.NAME: m for m in (overhead, throughput, commands, scaling, memory, fanout, nested, embedded, batch,
                                 recovery, provider_batches)}
"""In the order they run: each needs a different worker set, and this order restarts fewest."""

SCENARIO_DEADLINE = 3 * STEP
"""Seconds a scenario may take per run, beyond its own steps' deadlines: a backstop for the waits
between steps (starting workers, opening engines), naming the step it was in."""

OPT_IN = {recovery.NAME, provider_batches.NAME}
"""Scenarios run only when named with ``--only`` (recovery kills workers and waits out leases;
provider_batches runs a large batch twice)."""

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench:results -->", "<!-- /bench:results -->"


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


async def run(args: argparse.Namespace) -> str:
    if args.scale:
        return await run_idle(args)
    sizes = QUICK if args.quick else FULL
    if args.workers:
        sizes = dataclasses.replace(sizes, scaling_workers=tuple(args.workers))
    sizes = dataclasses.replace(sizes, scaling_roots=args.roots)
    stack = Stack(args.profile)
    bench = Bench(stack, sizes, args.runs)
    rows: list[Row] = []
    started = time.monotonic()
    try:
        stack.start_model("instant", 0.0)
        stack.start_model("slow", sizes.fanout_latency)
        stack.start_model("hold", 0.0, hold=True)
        stack.start_model("fifty", sizes.scaling_latency)
        stack.start_model("embed", sizes.embed_latency)
        stack.write_config(*config(sizes, stack.models))
        for name in args.only or [n for n in SCENARIOS if n not in OPT_IN]:
            print(f"bench: {name} …", file=sys.stderr, flush=True)
            t = time.monotonic()
            within = SCENARIO_DEADLINE * (args.runs + 1)
            deadline = asyncio.timeout(within)
            try:
                async with deadline:
                    rows += await SCENARIOS[name].measure(bench)
            except TimeoutError:
                if not deadline.expired():
                    raise
                raise BenchError(f"bench: {name}: overran its {within:g}s deadline in step "
                                 f"'{bench.current or 'start-up'}'{stack.tails()}") from None
            print(f"bench: {name} done in {time.monotonic() - t:.1f}s", file=sys.stderr, flush=True)
    finally:
        bench.close()
        await asyncio.to_thread(stack.close)
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    mode = "quick" if args.quick else "full"
    return "\n".join([
        f"Measured {when}: `python -m bench{' --quick' if args.quick else ''}"
        f"{''.join(f' --only {n}' for n in args.only or [])} --runs {args.runs}` "
        f"({mode} sizes, {time.monotonic() - started:.0f} s). Medians over {args.runs} run(s), min–max in "
        "brackets; ratios are computed per run against the reference measured in the same run.",
        "",
        describe(REDIS_URL),
        "",
        table(rows),
    ])


async def run_idle(args: argparse.Namespace) -> str:
    """The idle-pool rows only (``--scale``): each on a redis-server of its own."""
    started = time.monotonic()
    rows = []
    for workers in args.workers or [8]:
        print(f"bench: idle pool, {args.scale} trees, {workers} workers …", file=sys.stderr, flush=True)
        times = (3.0, 2.0) if args.quick else (idle.WINDOW, idle.SETTLE)  # --quick: the smoke test's
        rows.append(await asyncio.to_thread(idle.measure_idle, args.scale, workers, *times))
    return "\n".join([
        f"Measured {datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%d %H:%M UTC')}: `python -m bench "
        f"{'--quick ' if args.quick else ''}--scale {args.scale} --workers "
        f"{','.join(str(w) for w in args.workers or [8])}` ({time.monotonic() - started:.0f} s).",
        "",
        describe(REDIS_URL),
        "",
        table(rows),
    ])


def _counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--workers: expected counts like 1,2,4,8,16, got {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"--workers: each count must be at least 1, got {text!r}")
    return counts


def write(doc: Path, results: str) -> None:
    text = doc.read_text() if doc.exists() else f"# Benchmarks\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        text = f"{text.rstrip()}\n\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{BEGIN}\n{results}\n{END}{tail}")


def _summarise(profile: Path) -> None:
    """The busiest innermost frames of each worker's samples, on stderr (the coordinator's file is
    written at this process's exit)."""
    for path in sorted(profile.glob("worker-*.collapsed")):
        print(f"bench: profile {path.name}, busiest innermost frames:\n{top(path)}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (the smoke test)")
    parser.add_argument("--only", action="append", choices=list(SCENARIOS), help="run only this scenario (repeatable)")
    parser.add_argument("--runs", type=int, default=5, help="runs per figure (default 5)")
    parser.add_argument("--workers", type=_counts, metavar="1,2,4,8,16",
                        help="worker process counts of the scaling row (default 1,2,4), or of --scale (default 8)")
    parser.add_argument("--roots", choices=("coordinator", "pool"), default="pool",
                        help="the scaling row's top-level runs: submitted to the pool (default), or driven "
                             "by this process, one coordinator for all of them")
    parser.add_argument("--scale", type=int, metavar="N",
                        help="only measure the idle pool's Redis load with N live idle trees (bench.idle)")
    parser.add_argument("--write", action="store_true", help=f"write the results into {DOC}")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="sample every process (bench.sampler): one collapsed-stacks file each in DIR")
    args = parser.parse_args(argv)
    if args.profile is not None:
        args.profile = args.profile.resolve()
        args.profile.mkdir(parents=True, exist_ok=True)
        Sampler(args.profile / "coordinator.collapsed").start()
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        results = asyncio.run(run(args))
    except KeyboardInterrupt:
        print("bench: interrupted; processes reaped, keys deleted", file=sys.stderr)
        return 130
    except BenchError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(results)
    if args.profile is not None:
        _summarise(args.profile)
    if args.write:
        write(DOC, results)
        print(f"bench: wrote {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
