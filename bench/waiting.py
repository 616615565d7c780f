"""11. Waiting costs what is due: N live trees waiting for a person's answer, the ``shelly batch``
that submitted them waiting on them, W idle worker processes (issue 33, build item 5).

``python -m bench --waiting N [--workers W]`` (default 2,000 trees, 2 workers). Runs on a
redis-server of its own (a free port; broker and store both on it), so the count is this pool's
alone. Each batch item is an agent whose first reply calls ``ask_user`` (no timeout, nobody
answers): its run registers the question and releases its worker, and the batch process waits for
all N roots. Once every question is open and the trees' first checks are over (their due hints
past), the window counts the commands per second Redis ran (``INFO commandstats``) and the TCP
connections the batch process holds to Redis (its sockets in ``/proc``, matched against
``/proc/net/tcp``). Targets (issue 33): ≤ 200 commands/s in total and ≤ 20 connections from the
batch process at 2,000 trees.

``BENCH_WORKER_PYTHONPATH`` (a checkout's root) runs the batch and the workers with that
checkout's ``shelly_dist``: how the "before" figures were taken.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis
import yaml

from bench.idle import _commands, _env, _wait_quiet
from bench.procs import BenchError, cpu_seconds
from bench.report import Row
from bench.servers import redis_cpu, start_redis_server
from shelly_dist.redisio.keys import Keys

NAME = "waiting"
SETTLE = 40.0
"""Seconds from the last question to the window (past ``requeue_after``: each tree's first check)."""
WINDOW = 20.0
"""Seconds the commands are counted over."""


def connections(pid: int, port: int) -> int:
    """TCP connections process ``pid`` holds to ``127.0.0.1:port``."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[9] in inodes and fields[3] == "01":
                count += 1
    return count


def _questions(client: redis.Redis, prefix: str) -> int:
    return sum(1 for _ in client.scan_iter(match=f"{prefix}s:*:question-trees", count=5000))


def measure_waiting(trees: int, workers: int, window: float = WINDOW, settle: float = SETTLE) -> Row:
    """One row: commands/s and the batch process's connections while ``trees`` roots wait."""
    root = Path(tempfile.mkdtemp(prefix="shelly-bench-waiting-"))
    procs: list[subprocess.Popen[bytes]] = []
    env = _env()
    batch: subprocess.Popen[bytes] | None = None
    try:
        port, server = start_redis_server(root)
        procs.append(server)
        client = redis.Redis(port=port, decode_responses=True)
        url, broker, prefix = f"redis://127.0.0.1:{port}/0", f"redis://127.0.0.1:{port}/1", "shelly-waiting:"
        (root / ".shelly").mkdir()
        ask = {"tool_calls": [{"name": "ask_user", "arguments": {"question": "Which one?"}}]}
        (root / ".shelly" / "config.yaml").write_text(yaml.safe_dump({
            "providers": [{"name": "script", "kind": "scripted", "model": "m", "script": {"asker": [ask, "done"]}}],
            "agents": [{"name": "asker", "provider": "script"}],
            "distributed": {"broker_url": broker, "redis_url": url, "queue": "waiting", "key_prefix": prefix},
        }))
        (root / "in.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "task": f"question {i}"}) + "\n"
                                               for i in range(trees)))
        for i in range(workers):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "shelly_dist.cli.main", "worker", "--concurrency", "32", "--hostname",
                 f"waiting{i}@bench", "--heartbeat-file", str(root / f"w{i}.heartbeat"), "--loglevel", "WARNING"],
                cwd=root, env=env, stdout=(root / f"w{i}.log").open("wb"), stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 120
        while not all((root / f"w{i}.heartbeat").exists() for i in range(workers)):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise BenchError(f"bench: waiting: the workers did not start:\n{(root / 'w0.log').read_text()[-2000:]}")
            time.sleep(0.2)
        batch = subprocess.Popen(
            [sys.executable, "-m", "shelly_dist.cli.main", "batch", "--tasks", "in.jsonl", "--output", "out.jsonl",
             "--quiet", "--concurrency", str(trees)],
            cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=(root / "batch.log").open("wb"))
        deadline = time.monotonic() + 30 + trees / 10
        while _questions(client, prefix) < trees:
            if time.monotonic() > deadline or batch.poll() is not None:
                raise BenchError(f"bench: waiting: {_questions(client, prefix)} of {trees} questions asked\n"
                                 f"{(root / 'batch.log').read_text()[-2000:]}")
            time.sleep(1.0)
        time.sleep(settle)
        _wait_quiet(client, Keys(prefix), time.monotonic() + 180)
        pids = [p.pid for p in procs[1:]]
        client.config_resetstat()
        cpu0, bcpu0, redis0, t0 = sum(map(cpu_seconds, pids)), cpu_seconds(batch.pid), redis_cpu(client), \
            time.monotonic()
        peak = 0
        while time.monotonic() - t0 < window:
            peak = max(peak, connections(batch.pid, port))
            time.sleep(1.0)
        counts, elapsed = _commands(client), time.monotonic() - t0
        cpu, bcpu = sum(map(cpu_seconds, pids)) - cpu0, cpu_seconds(batch.pid) - bcpu0
        server_cpu = redis_cpu(client) - redis0
        rate = sum(counts.values()) / elapsed
        top = ", ".join(f"{name} {n / elapsed:.0f}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1])[:5])
        client.close()
        ok = trees <= 2000
        return Row("11", f"waiting: {trees:,} trees waiting for answers, `shelly batch` waiting on them, "
                         f"{workers} idle worker process{'es' if workers > 1 else ''}",
                   "cmd/s", [rate], target="≤ 200 cmd/s, ≤ 20 connections" if ok else "",
                   limit=("<=", 200.0) if ok else None, on="value",
                   note=f"the batch process held {peak} connections to Redis (peak over the window) and used "
                        f"{100 * bcpu / elapsed:.0f} % of a core; Redis CPU {100 * server_cpu / elapsed:.0f} %, "
                        f"workers' CPU {100 * cpu / elapsed:.0f} %; busiest commands/s: {top}")
    finally:
        if batch is not None and batch.poll() is None:
            batch.send_signal(signal.SIGINT)  # cancels every tree it waits for
            try:
                batch.wait(120)
            except subprocess.TimeoutExpired:
                batch.kill()
                batch.wait(5)
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(procs):
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        shutil.rmtree(root, ignore_errors=True)
