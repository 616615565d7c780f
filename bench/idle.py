"""9. The idle pool's Redis load: N live idle trees, W worker processes, no work at all (issue 27).

``python -m bench --scale N --workers W`` (one row per W). Runs on a redis-server of its own (a
free port, its own temporary directory; broker and store both on it, as a small deployment has
them), so the count is this pool's alone: the commands per second Redis ran (``INFO
commandstats``, which counts the commands scripts run too) over a window after the workers have
settled, with Redis's and the workers' CPU over the same window.

The trees: half are sessions whose coordinator waits (a root run in the coordinator, no deadline),
half are runs on the pool waiting for a user's answer (a worker-mode root, ``waiting`` with one
answer pending, its deadline dropped as a release drops it). The window starts more than
``requeue_after`` (30 s) after the trees were created and once no tree's hint is due, so the one
check each tree's first hint asks for is over (that burst is work that was due, not idle cost).
Nothing is due then, so a reaper whose cost follows what is due (DESIGN §3 rule 17) costs the
same as with no tree at all.

``BENCH_WORKER_PYTHONPATH`` (a checkout's root) runs the workers and the tree creation with that
checkout's ``shelly_dist`` instead: how the "before" figures were taken.
"""

from __future__ import annotations

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

from bench.procs import BenchError, cpu_seconds
from bench.report import Row
from bench.servers import redis_cpu, start_redis_server
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.journal.due import SHARDS

NAME = "idle"
SETTLE = 40.0
"""Seconds from the trees' creation to the window (past ``requeue_after``, 30 s: the workers'
start-up, first scans, elections and each tree's first check are over)."""
WINDOW = 20.0
"""Seconds the commands are counted over."""

CREATE = """
import asyncio, sys
from shelly_dist.runtime.celery.journal import Journal
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.settings import RuntimeSettings
from shelly_dist.redisio.connection import connect

async def main(url, prefix, n):
    client = connect(url)
    journal, keys = Journal(client, RuntimeSettings(broker_url=url, redis_url=url, key_prefix=prefix)), Keys(prefix)
    async def one(i):
        run_id, mode = f"idle{i:06d}", "worker" if i % 2 else "coordinator"
        await journal.create_root(run_id, agent="lead", session=f"s{i % 100}", mode=mode, task="wait",
                                  fingerprint="bench-idle")
        if mode == "worker":  # waiting on a user's answer: what RELEASE leaves
            await client.hset(keys.run(run_id), mapping={"status": "waiting", "pending": "1"})
            await client.zrem(keys.tree_deadlines(run_id), run_id)
    for start in range(0, n, 500):
        await asyncio.gather(*(one(i) for i in range(start, min(n, start + 500))))
    await client.aclose()

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHELLY_")}
    other = os.environ.get("BENCH_WORKER_PYTHONPATH")
    if other:
        env["PYTHONPATH"] = other
    return env


def _commands(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()
            if k not in ("cmdstat_info", "cmdstat_config")}


def _wait_quiet(client: redis.Redis, keys: Keys, deadline: float) -> None:
    """Until no tree's hint in the due index has passed: the first check of each tree is over."""
    while sum(client.zcount(keys.due_shard(s), "-inf", int(time.time() * 1000)) for s in range(SHARDS)):
        if time.monotonic() > deadline:
            raise BenchError("bench: idle: the reapers did not get through the trees' first checks")
        time.sleep(1.0)


def measure_idle(trees: int, workers: int, window: float = WINDOW, settle: float = SETTLE) -> Row:
    """One row: commands/s an idle pool of ``workers`` processes sends Redis with ``trees`` live trees."""
    root = Path(tempfile.mkdtemp(prefix="shelly-bench-idle-"))
    procs: list[subprocess.Popen[bytes]] = []
    env = _env()
    try:
        port, server = start_redis_server(root)
        procs.append(server)
        client = redis.Redis(port=port, decode_responses=True)
        url, broker, prefix = f"redis://127.0.0.1:{port}/0", f"redis://127.0.0.1:{port}/1", "shelly-idle:"
        (root / ".shelly").mkdir()
        (root / ".shelly" / "config.yaml").write_text(yaml.safe_dump({
            "providers": [{"name": "script", "kind": "scripted", "model": "m", "script": {"lead": ["done"]}}],
            "agents": [{"name": "lead", "provider": "script"}],
            "distributed": {"broker_url": broker, "redis_url": url, "queue": "idle", "key_prefix": prefix},
        }))
        subprocess.run([sys.executable, "-c", CREATE, url, prefix, str(trees)], cwd=root, env=env, check=True,
                       timeout=600)
        created = time.monotonic()
        for i in range(workers):
            beat = root / f"w{i}.heartbeat"
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "shelly_dist.cli.main", "worker", "--concurrency", "4", "--hostname",
                 f"idle{i}@bench", "--heartbeat-file", str(beat), "--loglevel", "WARNING"],
                cwd=root, env=env, stdout=(root / f"w{i}.log").open("wb"), stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 120
        while not all((root / f"w{i}.heartbeat").exists() for i in range(workers)):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise BenchError(f"bench: idle: the workers did not start:\n{(root / 'w0.log').read_text()[-2000:]}")
            time.sleep(0.2)
        time.sleep(max(0.0, created + settle - time.monotonic()))
        _wait_quiet(client, Keys(prefix), time.monotonic() + 180)
        pids = [p.pid for p in procs[1:]]
        client.config_resetstat()
        cpu0, redis0, t0 = sum(map(cpu_seconds, pids)), redis_cpu(client), time.monotonic()
        time.sleep(window)
        counts, elapsed = _commands(client), time.monotonic() - t0
        cpu, server_cpu = sum(map(cpu_seconds, pids)) - cpu0, redis_cpu(client) - redis0
        rate = sum(counts.values()) / elapsed
        top = ", ".join(f"{name} {n / elapsed:.0f}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1])[:5])
        client.close()
        return Row("9", f"idle pool: {trees:,} live idle trees, {workers} worker process{'es' if workers > 1 else ''}",
                   "cmd/s", [rate], target="≤ 200 cmd/s" if trees >= 10_000 and workers >= 8 else "",
                   limit=("<=", 200.0) if trees >= 10_000 and workers >= 8 else None, on="value",
                   note=f"Redis CPU {100 * server_cpu / elapsed:.0f} %, workers' CPU {100 * cpu / elapsed:.0f} % "
                        f"of a core in all; busiest commands/s: {top}")
    finally:
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
