"""``python -m bench.timeline``: a wall-clock timeline of one sequential delegation (row 1).

Row 1 is latency, not CPU, so the sampler's busy stacks cannot say where its milliseconds go. This
wraps a fixed list of the runtime's functions (:data:`TARGETS`, in the coordinator and in the worker)
so that every call records its start and end (``time.time_ns``: one clock across processes on
one machine), runs ``--reps`` delegations of the ``one`` agent as row 1 does, and prints, per
step, the median milliseconds after the delegation's start at which it began and how long it took.
The wrappers cost a few microseconds per call; the delegation's total is printed beside row 1's
figure of the same run so the two can be compared.

    BENCH_REDIS_URL=redis://127.0.0.1:P/0 python -m bench.timeline --reps 30

A worker runs under it as ``python -m bench.timeline --worker OUT.jsonl shelly_dist.cli.main worker …``.
Nothing under ``shelly_dist`` is changed: the functions are replaced in this process's modules only.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import functools
import importlib
import inspect
import json
import os
import runpy
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

TARGETS = [
    # coordinator
    "shelly_dist.engine.session:Session.send_messages",
    "shelly_dist.runtime.celery.client.coordinator:CeleryRuntime.execute",
    "shelly_dist.runtime.celery.client.coordinator:CeleryRuntime._check_broker",
    "shelly_dist.runtime.celery.journal.runs:Journal.open_root",
    "shelly_dist.providers.scripted:ScriptedCompleter.complete",
    "shelly_dist.runtime.celery.client.coordinator:_Awaiter.delegate",
    "shelly_dist.runtime.celery.client.coordinator:_Awaiter._subscribed",
    "shelly_dist.runtime.celery.children.dispatch:dispatch_children",
    "shelly_dist.runtime.celery.fast_send:RedisSend.__call__",
    "shelly_dist.runtime.celery.fast_send:RedisSend._push",
    "shelly_dist.runtime.celery.journal.runs:Journal.sent",
    "shelly_dist.runtime.celery.journal.stream:StreamSink.flush",
    "shelly_dist.runtime.celery.journal.stream:StreamSink.flush_reading",
    "shelly_dist.runtime.celery.client.coordinator:_Awaiter._entries",
    "shelly_dist.runtime.celery.journal.runs:Journal.joined",
    "shelly_dist.redisio.hub:Watch.moved",
    "shelly_dist.redisio.hub:Watch._move",
    "shelly_dist.runtime.celery.client.coordinator:_Awaiter._caught_up",
    "shelly_dist.runtime.celery.client.tail:Tail.catch_up",
    "shelly_dist.runtime.celery.client.tail:Tail.close",
    "shelly_dist.runtime.celery.client.tree_end:until_tree_ended",
    "shelly_dist.runtime.celery.client.coordinator:_Awaiter.aclose",
    "shelly_dist.runtime.celery.client.coordinator:CeleryRuntime._close_root",
    "shelly_dist.runtime.celery.journal.runs:Journal.is_canceled",
    "shelly_dist.redisio.hub:Hub.watch",
    "shelly_dist.redisio.hub:Hub._drop",
    "shelly_dist.redisio.hub:Hub._subscribe",
    # embedded (the local runtime, in this process)
    "shelly_dist.runtime.local.delegator:InlineDelegator.delegate",
    "shelly_dist.runtime.local.delegator:InlineDelegator.run_child",
    "shelly_dist.runtime.local.delegator:InlineDelegator._slot",
    "shelly_dist.runtime.local.delegator:InlineDelegator.spawn",
    "shelly_dist.runtime.local.delegator:InlineDelegator._run",
    # worker
    "shelly_dist.runtime.celery.worker.tasks:_advance",
    "shelly_dist.runtime.celery.worker.process:WorkerProcess.call",
    "shelly_dist.runtime.celery.worker.executor:Executor.advance",
    "shelly_dist.runtime.celery.children.policy:PoolPolicy.slot",
    "shelly_dist.runtime.celery.worker.executor:Executor._claim_and_advance",
    "shelly_dist.runtime.celery.journal.runs:Journal.claim",
    "shelly_dist.runtime.celery.worker.executor:Executor._advance",
    "shelly_dist.runtime.celery.worker.executor:Executor._rebuild",
    "shelly_dist.providers.http:HTTPCompleter.complete",
    "shelly_dist.runtime.celery.journal.lease:Lease.checkpoint",
    "shelly_dist.runtime.celery.worker.executor:Executor._end",
    "shelly_dist.runtime.celery.children.join:finish_and_join",
    "shelly_dist.runtime.celery.journal.lease:Lease.finish",
    "shelly_dist.agent.agent:Agent.execute",
]
"""``module:qualname`` of the functions timed (those missing in this version are skipped)."""

_records: list[tuple[str, int, int, int]] = []
_lock = threading.Lock()


def _wrap(name: str, fn: Any) -> Any:
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            t0 = time.time_ns()
            try:
                return await fn(*args, **kwargs)
            finally:
                with _lock:
                    _records.append((name, threading.get_ident(), t0, time.time_ns()))
        return timed_async
    if inspect.isasyncgenfunction(fn):
        return fn

    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.time_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            with _lock:
                _records.append((name, threading.get_ident(), t0, time.time_ns()))
    return timed


def install() -> list[str]:
    """Replace every target in its module (and wherever it was imported by name); the names done."""
    done = []
    for target in TARGETS:
        module_name, qualname = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        owner: Any = module
        parts = qualname.split(".")
        for part in parts[:-1]:
            owner = getattr(owner, part, None)
        original = getattr(owner, parts[-1], None) if owner is not None else None
        if original is None:
            continue
        short = qualname
        wrapped = _wrap(short, original)
        setattr(owner, parts[-1], wrapped)
        if owner is module:  # ``from module import fn`` elsewhere
            for other in list(sys.modules.values()):
                ours = getattr(other, "__name__", "").startswith("shelly_dist")
                if ours and getattr(other, parts[-1], None) is original:
                    setattr(other, parts[-1], wrapped)
        done.append(short)
    return done


def dump(out: Path) -> None:
    with _lock:
        lines = [json.dumps({"name": n, "pid": os.getpid(), "thread": t, "t0": a, "t1": b}) for n, t, a, b in _records]
    out.write_text("\n".join(lines) + "\n")


def _worker_main(out: Path, module: str, argv: list[str]) -> None:
    install()
    atexit.register(dump, out)
    sys.argv = [module, *argv]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def _traced_stack(trace_dir: Path) -> Any:
    """A bench stack whose workers run under this module's wrappers (``--worker``)."""
    from bench.harness import Stack

    return Stack(wrapper=lambda name: ["-m", "bench.timeline", "--worker", str(trace_dir / f"worker-{name}.jsonl")])


async def _drive(reps: int, trace_dir: Path) -> dict[str, Any]:
    from bench.context import Bench
    from bench.harness import delegate_once
    from bench.team import FULL, config

    stack = _traced_stack(trace_dir)
    bench = Bench(stack, FULL, 1)
    marks: list[tuple[int, int]] = []
    try:
        stack.start_model("instant", 0.0)
        stack.write_config(*config(FULL, stack.models))
        await stack.use_workers({"main": FULL.concurrency})
        raw = await bench.raw_roundtrip(20) * 1000
        async with stack.engine() as engine:
            for _ in range(3):
                await delegate_once(engine, "one")  # warm-up
            _records.clear()
            for _ in range(reps):
                t0 = time.time_ns()
                await delegate_once(engine, "one")
                marks.append((t0, time.time_ns()))
        raw_after = await bench.raw_roundtrip(20) * 1000
    finally:
        bench.close()
        await asyncio.to_thread(stack.close)  # workers exit: their traces are written
    return {"marks": marks, "raw_ms": [raw, raw_after]}


async def _drive_spread(agent: str, reps: int, trace_dir: Path) -> dict[str, Any]:
    """``reps`` delegations of ``agent`` (``fan``: 500 children at 1 s on one worker, as row 2;
    ``burst``: 200 instant children, 1 worker × 50, as row 4; ``embed``: 200 children at 0.5 s in
    this process, as row 5), after one warm-up; also the worker's CPU seconds over each."""
    from bench.harness import delegate_once
    from bench.procs import cpu_seconds
    from bench.team import FULL, config

    stack = _traced_stack(trace_dir)
    marks: list[tuple[int, int]] = []
    cpu: list[float] = []
    try:
        stack.start_model("instant", 0.0)
        stack.start_model("slow", FULL.fanout_latency)
        stack.start_model("embed", FULL.embed_latency)
        stack.write_config(*config(FULL, stack.models))
        embedded = agent == "embed"
        if not embedded:
            name, c = ("fan", FULL.fanout_n) if agent == "fan" else ("main", FULL.concurrency)
            await stack.use_workers({name: c})
        async with stack.engine(embedded=embedded) as engine:
            await delegate_once(engine, "one" if not embedded else "embed")
            _records.clear()
            for _ in range(reps):
                pid = os.getpid() if embedded else stack.worker_pid(name)
                before = cpu_seconds(pid)
                t0 = time.time_ns()
                await delegate_once(engine, agent)
                marks.append((t0, time.time_ns()))
                cpu.append(cpu_seconds(pid) - before)
    finally:
        await asyncio.to_thread(stack.close)
    return {"marks": marks, "cpu": cpu}


def _spread(result: dict[str, Any], trace_dir: Path) -> str:
    """Per timed function: calls per delegation, first/median/last start and last end (ms after
    the delegation began), and the sum of its durations (overlapping calls add up)."""
    records = _all_records(trace_dir)
    lines = []
    for (t0, t1), cpu in zip(result["marks"], result["cpu"], strict=True):
        lines.append(f"delegation: {(t1 - t0) / 1e6:.0f} ms wall, {cpu * 1000:.0f} ms CPU "
                     f"of the process running the children")
        lines.append(f"  {'function':52} {'calls':>5} {'first':>7} {'median':>7} {'last':>7} {'end':>7} {'sum ms':>8}")
        groups: dict[str, list[dict[str, Any]]] = {}
        for r in records:
            if t0 <= r["t0"] and r["t1"] <= t1:
                groups.setdefault(r["key"], []).append(r)
        for key, rs in sorted(groups.items(), key=lambda kv: min(r["t0"] for r in kv[1])):
            starts = sorted((r["t0"] - t0) / 1e6 for r in rs)
            end = max((r["t1"] - t0) / 1e6 for r in rs)
            total = sum(r["t1"] - r["t0"] for r in rs) / 1e6
            lines.append(f"  {key:52} {len(rs):5d} {starts[0]:7.0f} {statistics.median(starts):7.0f} "
                         f"{starts[-1]:7.0f} {end:7.0f} {total:8.0f}")
    return "\n".join(lines)


def _all_records(trace_dir: Path) -> list[dict[str, Any]]:
    records = [{"name": n, "pid": os.getpid(), "thread": t, "t0": a, "t1": b} for n, t, a, b in _records]
    for path in trace_dir.glob("worker-*.jsonl"):
        records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for r in records:
        r["key"] = r["name"] if r["pid"] == os.getpid() else f"[worker] {r['name']}"
    return records


def _report(result: dict[str, Any], trace_dir: Path) -> str:
    records = [{"name": n, "pid": os.getpid(), "thread": t, "t0": a, "t1": b} for n, t, a, b in _records]
    for path in trace_dir.glob("worker-*.jsonl"):
        records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    marks = result["marks"]
    per: dict[str, list[tuple[float, float]]] = {}
    for t0, t1 in marks:
        seen: dict[str, int] = {}
        for r in sorted(records, key=lambda r: r["t0"]):
            if t0 <= r["t0"] and r["t1"] <= t1:
                key = r["name"] if r["pid"] == os.getpid() else f"[worker] {r['name']}"
                seen[key] = seen.get(key, 0) + 1
                key = f"{key} #{seen[key]}"
                per.setdefault(key, []).append(((r["t0"] - t0) / 1e6, (r["t1"] - r["t0"]) / 1e6))
    totals = [(b - a) / 1e6 for a, b in marks]
    lines = [f"delegations: {len(marks)}, median {statistics.median(totals):.2f} ms "
             f"(min {min(totals):.2f}, max {max(totals):.2f}); raw Celery delay().get() before/after: "
             + ", ".join(f"{x:.2f}" for x in result["raw_ms"]) + " ms",
             f"{'step':70} {'n':>3} {'start ms':>9} {'took ms':>8}"]
    rows = sorted(per.items(), key=lambda kv: statistics.median(s for s, _ in kv[1]))
    for key, values in rows:
        if len(values) < len(marks) // 2:
            continue
        lines.append(f"{key:70} {len(values):3d} {statistics.median(s for s, _ in values):9.2f} "
                     f"{statistics.median(d for _, d in values):8.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        _worker_main(Path(argv[1]), argv[2], argv[3:])
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.timeline")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--agent", choices=["one", "fan", "burst", "embed"], default="one",
                        help="one: row 1's per-step medians; the others: each function's spread over a fan-out")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bench-timeline"))
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    for old in args.dir.glob("worker-*.jsonl"):
        old.unlink()
    installed = install()
    print(f"timed: {len(installed)} functions", file=sys.stderr)
    if args.agent == "one":
        print(_report(asyncio.run(_drive(args.reps, args.dir)), args.dir))
    else:
        print(_spread(asyncio.run(_drive_spread(args.agent, args.reps, args.dir)), args.dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
