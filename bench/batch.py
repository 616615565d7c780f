"""10. ``shelly batch`` items per second through two worker processes, against raw Celery no-op
tasks per second (the same number of tasks, sent at once) measured in the same run.

Each run is the real command, ``shelly batch --quiet`` in its own process, over a fresh input of N
items for the instant model (a new ``--batch-id`` each run, so nothing is adopted from a previous
one). The figure is the steady rate, from the first output line to the last (the command's start-up,
imports and config, is left out and given in the note with the whole command's time); the note
also gives the CPU the batch process and the workers spent per item, and the batch's peak RSS.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.context import STEP, Bench
from bench.procs import BenchError, cpu_seconds
from bench.report import Row, paired

NAME = "batch"
WORKERS = 2
POLL = 0.02
"""Seconds between two counts of the output's lines (the rate's clock resolution)."""


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def run_batch(root: Path, env: dict[str, str], n: int, run: int, within: float) -> tuple[float, float, float, float]:
    """One ``shelly batch`` of ``n`` items: (items/s from first to last line, the whole command's
    seconds, its CPU seconds, its peak RSS in MB). Blocking; ``BenchError`` on failure or overrun."""
    tasks, output = root / f"batch-{run}.jsonl", root / f"batch-{run}.out.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"item {i}", "agent": "instant_child", "task": f"question {i}"}) + "\n"
                             for i in range(n)))
    output.unlink(missing_ok=True)
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "shelly_dist.cli.main", "batch", "--tasks", str(tasks), "--output", str(output),
         "--quiet", "--batch-id", f"bench-{run}-{os.urandom(4).hex()}"],
        cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    first = None
    try:
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if first is None and _lines(output):
                first = time.perf_counter()
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                break
            if time.perf_counter() - start > within:
                raise BenchError(f"bench: batch run {run}: {_lines(output)} of {n} items after {within:g}s")
            time.sleep(POLL)
    finally:
        if proc.returncode is None:
            proc.kill()
            proc.wait()
    last = time.perf_counter()
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0 or _lines(output) != n:
        raise BenchError(f"bench: batch run {run}: exit {proc.returncode}, {_lines(output)} of {n} lines\n"
                         f"{stderr[-2000:]}")
    rate = (n - 1) / (last - first) if first is not None and last > first else n / (last - start)
    return rate, last - start, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024  # KiB on Linux


async def measure(b: Bench) -> list[Row]:
    n, c = b.sizes.batch_n, b.sizes.concurrency
    names = [f"batch{i}" for i in range(WORKERS)]
    await b.stack.use_workers(dict.fromkeys(names, c))
    pids = [b.stack.worker_pid(name) for name in names]
    values, refs, whole, batch_ms, workers_ms, rss = [], [], [], [], [], []
    await b.step("batch: warm-up", STEP, asyncio.to_thread(run_batch, b.stack.root, b.stack.env, 2, 0, STEP))
    for run in range(1, b.runs + 1):
        before = [cpu_seconds(p) for p in pids]
        rate, seconds, cpu, peak = await b.step(
            f"batch run {run}: shelly batch of {n} items", 4 * STEP,
            asyncio.to_thread(run_batch, b.stack.root, b.stack.env, n, run, 4 * STEP))
        values.append(rate)
        whole.append(seconds)
        batch_ms.append(cpu * 1000 / n)
        workers_ms.append(sum(cpu_seconds(p) - w for p, w in zip(pids, before, strict=True)) * 1000 / n)
        rss.append(peak)
        refs.append(await b.step(f"batch run {run}: {n} raw Celery tasks", STEP, b.raw_rate(n)))
    return [Row("10", f"batch: `shelly batch` of {n} items, instant model, {WORKERS} workers × {c}", "/s", values,
                "raw Celery no-op tasks", refs, paired(values, refs),
                note=f"first to last output line; the whole command {statistics.median(whole):.1f} s; CPU per item: "
                     f"batch process {statistics.median(batch_ms):.2f} ms (start-up included), workers "
                     f"{statistics.median(workers_ms):.2f} ms; batch peak RSS {statistics.median(rss):.0f} MB")]
