"""``python -m bench.heap``: where a worker's memory per in-flight run goes (row 7).

Starts one worker (``--concurrency N``), runs a warm-up delegation, turns :mod:`tracemalloc` on in
the worker, runs another, has the worker dump a snapshot and its live objects counted by type (a trigger file, polled),
starts a
delegation of N children whose model holds every call (the ``hold`` model, as row 7 does), dumps
again once all N calls are held, releases them, and prints the difference: the RSS, the heap
tracemalloc traces, the top allocation sites grouped by the innermost frame, by the innermost
``shelly_dist`` frame and by package, and the object types that grew.

    BENCH_REDIS_URL=redis://127.0.0.1:P/0 python -m bench.heap --n 500

tracemalloc slows the worker several times and adds its own bookkeeping to the RSS, so the RSS
here is not row 7's figure; the heap difference is what the Python allocations of N runs cost.
A worker runs under it as ``python -m bench.heap --worker DIR shelly_dist.cli.main worker …``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import json
import linecache
import os
import runpy
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the harness imports Celery and the engine: only where a run needs them
    from bench.harness import Stack

FRAMES = 16
"""Frames kept per allocation: enough to reach the runtime's frame below aiohttp/redis-py."""


def _dump(directory: Path) -> None:
    """Write ``snap-K.tracemalloc`` and ``snap-K.json`` (object counts, RSS) for the K-th signal."""
    k = len(list(directory.glob("snap-*.json")))
    gc.collect()
    counts: collections.Counter[str] = collections.Counter()
    for obj in gc.get_objects():
        t = type(obj)
        counts[f"{t.__module__}.{t.__qualname__}"] += 1
    tracemalloc.take_snapshot().dump(str(directory / f"snap-{k}.tracemalloc"))
    rss = int(Path(f"/proc/{os.getpid()}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    traced, _ = tracemalloc.get_traced_memory()
    (directory / f"snap-{k}.json").write_text(json.dumps({"rss": rss, "traced": traced, "counts": counts}))


def _worker_main(directory: Path, module: str, argv: list[str]) -> None:
    def watch() -> None:  # Celery owns the signals; trigger files ask for the start and each dump
        while True:
            if not tracemalloc.is_tracing() and (directory / "start").exists():
                tracemalloc.start(FRAMES)  # after start-up: tracing every import made it overrun 90 s
                (directory / "tracing").touch()
            k = len(list(directory.glob("snap-*.json")))
            if (directory / f"dump-{k}").exists():
                _dump(directory)
            time.sleep(0.1)

    threading.Thread(target=watch, name="bench-heap", daemon=True).start()
    sys.argv = [module, *argv]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


async def _start(stack: Stack, n: int) -> None:
    """Row 7's models, team and one worker ``--concurrency n`` (the memory row's set-up)."""
    from bench.team import FULL, config

    stack.start_model("instant", 0.0)
    stack.start_model("hold", 0.0, hold=True)
    stack.start_model("slow", 1.0)
    stack.write_config(*config(FULL.__class__(memory_n=n, fanout_n=n), stack.models))
    await stack.use_workers({"fan": n})


async def _drive(n: int, directory: Path) -> None:
    from bench.harness import Stack, delegate_once, wait_for

    async def snapshot(k: int) -> None:
        (directory / f"dump-{k}").touch()
        await wait_for(lambda: asyncio.to_thread((directory / f"snap-{k}.json").exists), 300, f"snapshot {k}")

    stack = Stack(wrapper=lambda _name: ["-m", "bench.heap", "--worker", str(directory)])
    try:
        await _start(stack, n)
        async with stack.engine() as engine:
            await delegate_once(engine, "one")
            (directory / "start").touch()
            await wait_for(lambda: asyncio.to_thread((directory / "tracing").exists), 60, "tracemalloc started")
            await delegate_once(engine, "one")
            await snapshot(0)
            run = asyncio.create_task(delegate_once(engine, "hold"))
            try:
                async def held() -> bool:
                    stats = await stack.model_stats("hold")
                    return stats["inflight"] >= n

                await wait_for(held, 300, f"{n} calls in flight", interval=0.2)
                await asyncio.sleep(1.0)
                await snapshot(1)
            finally:
                await stack.model_stats("hold", "release")
            await run
    finally:
        await asyncio.to_thread(stack.close)


def smaps(pid: int) -> dict[str, float]:
    """The process's resident memory by kind of mapping, in KB: thread stacks (anonymous mappings
    of 8 MB, the default stack size), the ``[heap]`` (brk), other anonymous mappings (pymalloc's
    arenas, glibc's per-thread arenas, mmap'd large blocks) and file-backed ones; and the threads."""
    out = {"stacks": 0.0, "heap": 0.0, "anon": 0.0, "files": 0.0}
    name, size = "", 0
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if "-" in head[0] and not head[0].endswith(":"):
            lo, hi = (int(x, 16) for x in head[0].split("-"))
            size, name = (hi - lo) // 1024, head[5] if len(head) > 5 else ""
        elif head[0] == "Rss:":
            rss = float(head[1])
            if name == "[heap]":
                out["heap"] += rss
            elif name.startswith("/"):
                out["files"] += rss
            elif size in (8192, 8196):
                out["stacks"] += rss
            else:
                out["anon"] += rss
    status = Path(f"/proc/{pid}/status").read_text()
    out["threads"] = float(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))
    return out


async def _drive_smaps(n: int) -> str:
    """Row 7's flow without tracemalloc: the worker's mappings at rest and with ``n`` runs held."""
    from bench.harness import Stack, delegate_once, wait_for

    stack = Stack()
    try:
        await _start(stack, n)
        pid = stack.worker_pid("fan")
        async with stack.engine() as engine:
            await delegate_once(engine, "one")
            rest = smaps(pid)
            run = asyncio.create_task(delegate_once(engine, "hold"))
            try:
                async def held() -> bool:
                    return (await stack.model_stats("hold"))["inflight"] >= n

                await wait_for(held, 120, f"{n} calls in flight", interval=0.1)
                busy = smaps(pid)
            finally:
                await stack.model_stats("hold", "release")
            await run
            after = smaps(pid)
    finally:
        await asyncio.to_thread(stack.close)
    lines = [f"{'':8} {'rest':>9} {'in flight':>9} {'after':>9} {'KB/run':>7}"]
    for key in rest:
        lines.append(f"{key:8} {rest[key]:9.0f} {busy[key]:9.0f} {after[key]:9.0f} {(busy[key] - rest[key]) / n:7.1f}")
    return "\n".join(lines)


def _package(filename: str) -> str:
    for marker in ("site-packages/", "/shelly_dist/", "/bench/"):
        if marker in filename:
            rest = filename.split(marker, 1)[1]
            if marker != "site-packages/":
                return marker.strip("/")
            return rest.split("/")[0]
    if "/lib/python3" in filename:
        return "stdlib:" + filename.rsplit("/", 1)[-1]
    return filename


def _report(directory: Path, n: int, top: int = 15) -> str:
    meta = [json.loads((directory / f"snap-{k}.json").read_text()) for k in (0, 1)]
    old, new = (tracemalloc.Snapshot.load(str(directory / f"snap-{k}.tracemalloc")) for k in (0, 1))
    skip = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap*")]
    old, new = old.filter_traces(skip), new.filter_traces(skip)
    diff = new.compare_to(old, "traceback")
    kb = 1024
    lines = [f"RSS {meta[0]['rss'] / kb / kb:.1f} → {meta[1]['rss'] / kb / kb:.1f} MB "
             f"(+{(meta[1]['rss'] - meta[0]['rss']) / kb / n:.0f} KB per run); tracemalloc heap "
             f"{meta[0]['traced'] / kb / kb:.1f} → {meta[1]['traced'] / kb / kb:.1f} MB "
             f"(+{(meta[1]['traced'] - meta[0]['traced']) / kb / n:.1f} KB per run)"]
    growth = sum(d.size_diff for d in diff)
    by_leaf: collections.Counter[str] = collections.Counter()
    by_ours: collections.Counter[str] = collections.Counter()
    by_pkg: collections.Counter[str] = collections.Counter()
    for d in diff:
        frames = list(d.traceback)[::-1]  # tracemalloc keeps the oldest first
        inner = frames[0]
        by_leaf[f"{_package(inner.filename)}:{inner.filename.rsplit('/', 1)[-1]}:{inner.lineno} "
                f"{linecache.getline(inner.filename, inner.lineno).strip()[:70]}"] += d.size_diff
        by_pkg[_package(inner.filename)] += d.size_diff
        ours = next((f for f in frames if "/shelly_dist/" in f.filename), None)
        where = "(no shelly_dist frame)"
        if ours is not None:
            where = (f"{ours.filename.split('/shelly_dist/', 1)[1]}:{ours.lineno} "
                     f"{linecache.getline(ours.filename, ours.lineno).strip()[:70]}")
        by_ours[where] += d.size_diff
    lines.append(f"heap growth over the traces compared: {growth / kb / kb:.2f} MB = {growth / kb / n:.1f} KB per run")
    for title, counter in (("by package of the allocating frame", by_pkg), ("by allocating line", by_leaf),
                           ("by innermost shelly_dist frame", by_ours)):
        lines.append(f"-- {title} (KB per run, share of growth):")
        for key, size in counter.most_common(top):
            lines.append(f"  {size / kb / n:7.2f}  {100 * size / growth:5.1f}%  {key}")
    grew = collections.Counter({t: c - meta[0]["counts"].get(t, 0) for t, c in meta[1]["counts"].items()})
    lines.append("-- gc-tracked objects that grew (per run):")
    for t, c in grew.most_common(top):
        lines.append(f"  {c / n:7.1f}  {t}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        _worker_main(Path(argv[1]), argv[2], argv[3:])
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.heap")
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bench-heap"))
    parser.add_argument("--smaps", action="store_true", help="no tracemalloc: the RSS by kind of mapping")
    args = parser.parse_args(argv)
    if args.smaps:
        print(asyncio.run(_drive_smaps(args.n)))
        return 0
    args.dir.mkdir(parents=True, exist_ok=True)
    for old in [*args.dir.glob("snap-*"), *args.dir.glob("dump-*"), *args.dir.glob("start"),
                *args.dir.glob("tracing")]:
        old.unlink()
    started = time.monotonic()
    asyncio.run(_drive(args.n, args.dir))
    print(_report(args.dir, args.n))
    print(f"({time.monotonic() - started:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
