"""The chaos soak (issue 41 item 3): ``python -m tests.chaos.soak --minutes N``; its short
version is ``tests/chaos/test_soak.py`` (marked ``slow``).

For ``--minutes`` it runs batches of root runs back to back (``shelly batch``; each item a lead
that delegates once to a helper which runs a tool), with an interactive ``shelly run`` now and
then, on two ``shelly worker`` processes with DEFAULT runtime settings, on a Redis of its own
(AOF, ``appendfsync always``, a free port — never the shared 6379), while:

* a worker is ``kill -9``-ed every ``--kill-every`` seconds (30) and a replacement started;
* Redis (journal and broker) is killed and restarted from its AOF every ``--redis-every`` (300);
* the workers' broker connection (a TCP proxy in front of the broker database) is cut for a few
  seconds every ``--cut-every`` (75);
* the loopback model answers 429 or 500 to ``--model-faults`` of its requests (5 %).

Then the invariants: every item of every batch and every interactive run ended once, completed (one
output line each, exit codes 0); no journaled model reply requested twice and no finished tool run
twice (the ledger of :mod:`tests.chaos.workload`); no key without a TTL; RSS of the batch process
and of Redis sampled (flat). Prints the figures docs/benchmarks.md carries: items/s, p50/p99 item
latency, per kill the seconds until the reapers sent its runs again, the longest item.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from shelly_dist.testing.model_server import RecordedRequest, Reply
from tests.chaos.conftest import ChaosCluster, Faults, WorkerPool
from tests.chaos.invariants import (
    assert_all_keys_have_ttl,
    assert_no_journaled_reply_requested_again,
    assert_no_tool_ran_twice,
    journal_text,
)
from tests.chaos.workload import Workload
from tests.integration.support.proxy import TcpProxy
from tests.integration.support.redis_server import RedisServer

BATCH_ITEMS = 60
BATCH_DEADLINE = 900.0
"""Seconds one batch may take: recovery costs seconds per fault; this only bounds a hang."""
RUN_EVERY = 20.0
RUN_START_MARGIN = 8.0
"""Seconds before an outage within which no interactive run starts (a process's start-up takes a
few): a run started while Redis cannot be reached fails at once by design; runs meet outages mid-way."""
LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): \w+/\w+\] reaper: (.*)$")


@dataclass
class SoakReport:
    minutes: float
    items: int = 0
    runs: int = 0
    latencies: list[float] = field(default_factory=list)
    kills: list[float] = field(default_factory=list)
    """Wall-clock times of the kills."""
    recoveries: list[float] = field(default_factory=list)
    """Per kill: seconds until the last re-send the reapers logged for it (ledger or lease)."""
    redis_restarts: int = 0
    cuts: int = 0
    model_faults: int = 0
    rss: dict[str, list[float]] = field(default_factory=dict)
    elapsed: float = 0.0

    def summary(self) -> str:
        lat = sorted(self.latencies)
        p = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]) if lat else (lambda q: float("nan"))
        rec = sorted(self.recoveries)
        rss = {k: (v[0], max(v), v[-1]) for k, v in self.rss.items() if v}
        return "\n".join([
            f"soak: {self.elapsed / 60:.1f} min, {self.items} items ({self.items / self.elapsed:.2f} items/s), "
            f"{self.runs} interactive runs",
            f"item latency p50 {p(0.5):.1f}s, p99 {p(0.99):.1f}s, longest {lat[-1] if lat else float('nan'):.1f}s",
            f"faults: {len(self.kills)} kill -9, {self.redis_restarts} Redis restarts, {self.cuts} broker cuts, "
            f"{self.model_faults} model 429/500",
            f"recovery per kill (kill → last re-send): median {statistics.median(rec) if rec else float('nan'):.1f}s, "
            f"max {rec[-1] if rec else float('nan'):.1f}s over {len(rec)} kills with runs to recover",
            "RSS MB (first, peak, last): " + ", ".join(f"{k} {a:.0f}/{b:.0f}/{c:.0f}" for k, (a, b, c) in rss.items()),
        ])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class FaultyModel:
    """The workload's model, answering 429 or 500 to a share of the requests (not recorded as
    served: the provider's retry asks again)."""

    def __init__(self, workload: Workload, share: float, rng: random.Random) -> None:
        self.workload, self.share, self.rng = workload, share, rng
        self.faults = 0
        self._lock = threading.Lock()
        workload.server.responder = self.respond

    def respond(self, req: RecordedRequest) -> Reply:
        with self._lock:
            fault = self.rng.random() < self.share
            if fault:
                self.faults += 1
        if fault:
            return Reply(status=self.rng.choice([429, 500]), text="chaos: try again", retry_after="0")
        return self.workload.respond(req)


def recoveries(cluster: ChaosCluster, kills: list[float]) -> list[float]:
    """Per kill: seconds from it to the last re-send the reapers logged within 60 s after it."""
    sends: list[float] = []
    for log in cluster.root.glob("w*.log"):
        for line in log.read_text(errors="replace").splitlines():
            m = LOG_TIME.match(line)
            if m and ("re-enqueued" in m.group(2) or "sending them again" in m.group(2)):
                sends.append(datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp())
    out = []
    for i, kill in enumerate(kills):
        end = min(kill + 60, kills[i + 1] if i + 1 < len(kills) else kill + 60)
        after = [s - kill for s in sends if kill <= s < end]
        if after:
            out.append(max(after))
    return out


def soak(root: Path, minutes: float, *, kill_every: float = 30.0, redis_every: float = 300.0,
         cut_every: float = 75.0, model_faults: float = 0.05, items: int = BATCH_ITEMS, seed: int | None = None,
         ) -> SoakReport:
    """Run the soak in ``root`` (see the module docstring); raises AssertionError on a broken invariant."""
    rng = random.Random(seed)
    report = SoakReport(minutes)
    redis = RedisServer(root / "redis")
    redis.start()
    proxy = TcpProxy(("127.0.0.1", redis.port)).start()
    workload = Workload(root / "tool-runs.txt", helpers=1, delay=(0.05, 0.3), seed=rng.randrange(1 << 30))
    model = FaultyModel(workload, model_faults, rng)
    workload.server.start()
    (root / "project").mkdir(parents=True, exist_ok=True)
    cluster = ChaosCluster(root / "project", redis_url=redis.url(0), broker_url=f"redis://127.0.0.1:{proxy.port}/1")
    faults = Faults()
    try:
        cluster.write_default_config(workload)
        pool = WorkerPool(cluster, 2, rng)
        started = time.monotonic()
        end = started + minutes * 60

        def schedule(f: Faults) -> None:
            next_kill, next_redis, next_cut = kill_every, redis_every, cut_every
            while True:
                now = time.monotonic() - started
                due = min(next_kill, next_redis, next_cut)
                f.next_outage = started + min(next_redis, next_cut)
                if not f.pause(max(0.0, due - now)):
                    return
                if due == next_kill:
                    report.kills.append(time.time())
                    f.log.append(f"{due:.0f}s kill {pool.kill_one()}")
                    next_kill += kill_every
                elif due == next_redis:
                    f.outage.set()
                    redis.kill()
                    f.stopped.wait(3.0)
                    redis.start()  # returns once it answers: its AOF loaded
                    f.outage.clear()
                    report.redis_restarts += 1
                    f.log.append(f"{due:.0f}s redis restarted from its AOF")
                    next_redis += redis_every
                else:
                    f.outage.set()
                    proxy.cut()
                    f.stopped.wait(3.0)
                    proxy.heal()
                    f.outage.clear()
                    report.cuts += 1
                    f.log.append(f"{due:.0f}s broker cut 3s")
                    next_cut += cut_every

        faults.run(schedule)
        interactive: list[tuple[int, subprocess.Popen[str]]] = []
        next_run, batch_no = started + RUN_EVERY / 2, 0
        while time.monotonic() < end:
            batch_no += 1
            tasks = root / "project" / f"in-{batch_no}.jsonl"
            tasks.write_text("".join(json.dumps({"id": f"b{batch_no}-{i}", "task": f"job {batch_no}.{i}"}) + "\n"
                                     for i in range(items)))
            output = root / "project" / f"out-{batch_no}.jsonl"
            proc = cluster.popen("batch", "--tasks", str(tasks), "--output", str(output), "--quiet")
            batch_started = time.monotonic()
            while proc.poll() is None:
                if time.monotonic() - batch_started > BATCH_DEADLINE:
                    proc.kill()
                    raise AssertionError(f"batch {batch_no} still running after {BATCH_DEADLINE:g}s "
                                         f"(seed {workload.seed}, faults {faults.log})\n{cluster.worker_log()}")
                if time.monotonic() >= next_run and faults.quiet(RUN_START_MARGIN):
                    interactive.append((len(interactive), cluster.popen("run", f"job r{len(interactive)}")))
                    next_run += RUN_EVERY
                for name, pid in [("batch", proc.pid), ("redis", redis.proc.pid if redis.proc else 0)]:
                    if pid:
                        try:
                            report.rss.setdefault(name, []).append(rss_mb(pid))
                        except OSError:
                            pass
                time.sleep(1.0)  # the soak's sampling tick (RSS, interactive runs), not a wait on a result
            _, stderr = proc.communicate()
            records = [json.loads(line) for line in output.read_text().splitlines()] if output.exists() else []
            assert proc.returncode == 0, f"batch {batch_no} exit {proc.returncode} (seed {workload.seed}, " \
                                         f"faults {faults.log}):\n{stderr[-3000:]}"
            ids = sorted(r["id"] for r in records)
            assert ids == sorted(f"b{batch_no}-{i}" for i in range(items)), f"batch {batch_no}: each item once"
            bad = [r for r in records if r["status"] != "completed" or not str(r.get("reply")).startswith("lead done")]
            assert not bad, f"batch {batch_no}: {bad[:5]}"
            report.items += len(records)
            report.latencies += [float(r["elapsed"]) for r in records]
        faults.stop()
        for i, proc in interactive:
            out, err = proc.communicate(timeout=BATCH_DEADLINE)
            assert proc.returncode == 0 and out.startswith("lead done"), f"interactive run {i}: {out}\n{err[-2000:]}"
        report.runs = len(interactive)
        report.elapsed = time.monotonic() - started
        report.model_faults = model.faults
        report.recoveries = recoveries(cluster, report.kills)
        with redis.client() as client:
            assert_no_journaled_reply_requested_again(workload, journal_text(client, cluster.prefix))
            assert_all_keys_have_ttl(client, cluster.prefix)
        assert_no_tool_ran_twice(workload.marker)
        exited = pool.exited()
        assert not exited, f"workers that died on their own: {exited}\n{cluster.worker_log()}"
        return report
    finally:
        faults.stopped.set()
        proxy.heal()
        if redis.proc is None or redis.proc.poll() is not None:
            redis.start()
        cluster.stop()
        proxy.stop()
        workload.server.stop()
        redis.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--items", type=int, default=BATCH_ITEMS, help="items per batch")
    parser.add_argument("--kill-every", type=float, default=30.0)
    parser.add_argument("--redis-every", type=float, default=300.0)
    parser.add_argument("--cut-every", type=float, default=75.0)
    parser.add_argument("--model-faults", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="shelly-soak-"))  # kept on a failure: the logs, outputs and AOF
    try:
        report = soak(tmp, args.minutes, kill_every=args.kill_every, redis_every=args.redis_every,
                      cut_every=args.cut_every, model_faults=args.model_faults, items=args.items, seed=args.seed)
    except AssertionError as exc:
        print(f"soak: FAILED (kept {tmp}): {exc}", file=sys.stderr)
        return 1
    print(report.summary())
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__: list[Any] = ["SoakReport", "main", "soak"]
