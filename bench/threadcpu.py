"""``python -m bench.threadcpu``: a worker's CPU per child, split by thread, and its event loop under cProfile.

The sampler (:mod:`bench.sampler`) is a Python thread: it gets the GIL mostly when another thread
gives it up for a system call, so its busy stacks over-count socket writes. This reads each
thread's own CPU time from ``/proc/<pid>/task/<tid>/stat`` around a burst of ``--reps`` row-4
delegations (200 instant children, one worker × 50): the Celery consumer (main thread: receiving
the tasks), the pool threads (waiting on the loop), the shelly loop thread, the lease renewer.
Then the same bursts again with cProfile on the loop thread only, its own time grouped by package.

    BENCH_REDIS_URL=redis://127.0.0.1:P/0 python -m bench.threadcpu --reps 3

A worker runs under it as ``python -m bench.threadcpu --worker DIR shelly_dist.cli.main worker …``
and acts on trigger files in DIR (``cpu-K``: write the threads' CPU; ``prof-on``, ``prof-off``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import json
import os
import pstats
import runpy
import sys
import threading
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _threads_cpu() -> dict[str, float]:
    """CPU seconds per thread of this process, by Python thread name (several of one name add up)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: collections.Counter[str] = collections.Counter()
    for task in Path("/proc/self/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / TICK
        name = names.get(int(task.name), "(native)")
        if name.startswith("ThreadPoolExecutor"):
            name = "pool threads (Celery threads pool)"
        out[name] += cpu
    return dict(out)


def _worker_main(directory: Path, module: str, argv: list[str]) -> None:
    def watch() -> None:
        profile = cProfile.Profile()
        done: set[str] = set()
        while True:
            for trigger in sorted(directory.glob("do-*")):
                if trigger.name in done:
                    continue
                done.add(trigger.name)
                action = trigger.name[3:]
                if action.startswith("cpu"):
                    (directory / f"{action}.json").write_text(json.dumps(_threads_cpu()))
                    continue
                from shelly_dist.runtime.celery.worker.process import WorkerProcess

                loop = WorkerProcess._instance.loop if WorkerProcess._instance else None
                if loop is None:
                    continue
                if action == "prof-on":
                    loop.call_soon_threadsafe(profile.enable)
                    (directory / "prof-on.done").touch()
                elif action == "prof-off":
                    def off() -> None:
                        profile.disable()
                        profile.dump_stats(str(directory / "loop.prof.part"))
                        os.replace(directory / "loop.prof.part", directory / "loop.prof")  # whole when seen
                    loop.call_soon_threadsafe(off)
            time.sleep(0.05)

    threading.Thread(target=watch, name="bench-threadcpu", daemon=True).start()
    sys.argv = [module, *argv]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


async def _drive(reps: int, directory: Path) -> tuple[dict[str, float], dict[str, float], int]:
    from bench.harness import Stack, delegate_once, wait_for
    from bench.team import FULL, config

    async def trigger(action: str, result: str) -> None:
        (directory / f"do-{action}").touch()
        await wait_for(lambda: asyncio.to_thread((directory / result).exists), 60, action)

    stack = Stack(wrapper=lambda _name: ["-m", "bench.threadcpu", "--worker", str(directory)])
    try:
        stack.start_model("instant", 0.0)
        stack.write_config(*config(FULL, stack.models))
        await stack.use_workers({"main": FULL.concurrency})
        async with stack.engine() as engine:
            await delegate_once(engine, "one")
            await delegate_once(engine, "burst")
            await trigger("cpu0", "cpu0.json")
            for _ in range(reps):
                await delegate_once(engine, "burst")
            await trigger("cpu1", "cpu1.json")
            await trigger("prof-on", "prof-on.done")
            for _ in range(reps):
                await delegate_once(engine, "burst")
            await trigger("prof-off", "loop.prof")
    finally:
        await asyncio.to_thread(stack.close)
    before, after = (json.loads((directory / f"cpu{k}.json").read_text()) for k in (0, 1))
    return before, after, reps * FULL.throughput_n


def _group(filename: str, function: str) -> str:
    if "/shelly_dist/" in filename:
        return "shelly_dist/" + filename.split("/shelly_dist/", 1)[1].split("/")[0]
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1].split("/")[0]
    if "/asyncio/" in filename:
        return "asyncio"
    if filename == "~":
        if "epoll" in function or "select" in function:
            return "(idle: epoll)"
        return "C built-ins: " + function.split(" of ")[0].strip("<>{}")[:40]
    return "stdlib: " + filename.rsplit("/", 1)[-1]


def _report(before: dict[str, float], after: dict[str, float], children: int, directory: Path) -> str:
    lines = [f"worker CPU per child by thread ({children} children, no profiler):"]
    total = 0.0
    for name in sorted(after, key=lambda n: before.get(n, 0.0) - after[n]):
        ms = (after[name] - before.get(name, 0.0)) * 1000 / children
        total += ms
        if ms >= 0.005:
            lines.append(f"  {ms:6.2f} ms  {name}")
    lines.append(f"  {total:6.2f} ms  all threads")
    stats = pstats.Stats(str(directory / "loop.prof"))
    groups: collections.Counter[str] = collections.Counter()
    top: list[tuple[float, str]] = []
    for (filename, line, function), (_, _, own, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        groups[_group(filename, function)] += own
        top.append((own, f"{filename.rsplit('/', 1)[-1]}:{line}({function})"))
    busy = sum(v for k, v in groups.items() if not k.startswith("(idle"))
    per_child = busy * 1000 / children
    lines.append(f"loop thread under cProfile: own time by package, share of its busy time ({per_child:.2f} ms "
                 "per child, profiler-inflated):")
    for key, own in groups.most_common(25):
        if not key.startswith("(idle"):
            lines.append(f"  {100 * own / busy:5.1f}%  {key}")
    lines.append("top functions by own time:")
    for own, name in sorted(top, reverse=True)[:20]:
        if "epoll" not in name:
            lines.append(f"  {100 * own / busy:5.1f}%  {name}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        _worker_main(Path(argv[1]), argv[2], argv[3:])
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.threadcpu")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bench-threadcpu"))
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    for old in args.dir.iterdir():
        old.unlink()
    before, after, children = asyncio.run(_drive(args.reps, args.dir))
    print(_report(before, after, children, args.dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
