"""13. Provider batches on the pool (issue 34): a ``shelly batch`` of N items, each an orchestrator
with two children whose provider sends its calls through OpenAI's Batch API (the loopback stand-in),
against the same batch with the children's calls made interactively, measured in the same run.

``python -m bench --only provider_batches`` (opt-in: it runs the batch twice), on a redis-server of
its own (broker and store; a free port), two ``shelly worker`` processes of 4 slots each:

- **13a cost**: the whole batch's cost (every run's own usage, at the price table) with the
  children batch-priced, over the same batch run interactively (target ≤ 0.55×), and whether every
  item's reply is the same;
- **13b slots held**: runs holding a worker (``running``) once all 2N batch requests wait in vendor
  batches (the stand-in holds them) — target 0: a waiting run holds no slot;
- **13c Redis while they wait**: commands per second Redis runs while the 2N requests wait (``INFO
  commandstats`` over :data:`WINDOW`), with the ``shelly batch`` process stopped (SIGSTOP) for the
  window: its own wait for its N roots is the provider governor's issue (33), not the batches';
  against the same pool idle right after the batch (what the requests' wait adds should not grow
  with N: it follows what is due — one poll per batch per ``poll_interval``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
import yaml

from bench.context import Bench
from bench.procs import BenchError
from bench.report import Row
from bench.servers import start_redis_server
from shelly_dist.testing.model_server import ModelServer, Reply

NAME = "provider_batches"
WORKERS = 2
SLOTS = 4
WINDOW = 10.0
"""Seconds the waiting pool's Redis commands are counted over."""
IN_FLIGHT = 250
"""Items ``shelly batch`` holds in flight (``--concurrency``): its own wait costs a connection per
item until issue 33's O(due) wait lands (2,000 at once failed to subscribe), so the measured wait is
of ``2 × IN_FLIGHT`` requests, while the cost covers every item."""
SETTLE = 5.0
"""Seconds from the last request reaching a vendor batch to the window (its run's suspension,
events and the lead's wait are written meanwhile: not the wait's cost)."""
STEP = 900.0
"""Seconds one batch may take end to end."""
USAGE = {"input": 1000, "output": 100}


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SHELLY_")}


class _Project:
    """A throwaway project on its own redis-server: config, workers, the model stand-in."""

    def __init__(self, model_url: str) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="shelly-bench-batches-"))
        self.procs: list[subprocess.Popen[bytes]] = []
        port, server = start_redis_server(self.root)
        self.procs.append(server)
        self.redis = redis.Redis(port=port, decode_responses=True)
        self.url, self.prefix, self.model_url = f"redis://127.0.0.1:{port}/0", "shelly-batches:", model_url
        self.workers: list[subprocess.Popen[bytes]] = []

    def config(self, batch: bool) -> None:
        vendor: dict[str, Any] = {"name": "vendor", "kind": "openai", "model": "gpt-4o", "base_url": self.model_url,
                                  "api_key": "k", "rate_limit": {"max_retries": 0},
                                  "batch": {"enabled": batch, "api": "openai", "collect_window": "2s",
                                            "poll_interval": "1s", "max_batch_size": 5000}}
        lead = {"name": "lead", "kind": "scripted", "model": "s", "script": {"lead": [
            {"tool_calls": [{"name": "delegate", "arguments": {"tasks": [
                {"agent": "leaf", "task": "part one of {task}", "context": ""},
                {"agent": "leaf", "task": "part two of {task}", "context": ""}]}}]},
            "both parts done"]}}
        (self.root / ".shelly").mkdir(exist_ok=True)
        (self.root / ".shelly" / "config.yaml").write_text(yaml.safe_dump({
            "providers": [lead, vendor],
            "agents": [{"name": "lead", "provider": "lead", "options": {"max_delegation_depth": 1}},
                       {"name": "leaf", "provider": "vendor"}],
            "distributed": {"broker_url": self.url.replace("/0", "/1"), "redis_url": self.url, "queue": "batches",
                            "key_prefix": self.prefix}}, sort_keys=False))

    def start_workers(self) -> None:
        self.stop_workers()
        for i in range(WORKERS):
            beat = self.root / f"w{i}.heartbeat"
            beat.unlink(missing_ok=True)
            self.workers.append(subprocess.Popen(
                [sys.executable, "-m", "shelly_dist.cli.main", "worker", "--concurrency", str(SLOTS), "--hostname",
                 f"batches{i}@bench", "--heartbeat-file", str(beat), "--loglevel", "WARNING"],
                cwd=self.root, env=_env(), stdout=(self.root / f"w{i}.log").open("ab"), stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 120
        while not all((self.root / f"w{i}.heartbeat").exists() for i in range(WORKERS)):
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.workers):
                raise BenchError(f"bench: {NAME}: the workers did not start:\n"
                                 f"{(self.root / 'w0.log').read_text()[-2000:]}")
            time.sleep(0.2)

    def stop_workers(self) -> None:
        for proc in self.workers:
            _stop(proc)
        self.workers = []

    def reset(self) -> None:
        for db in (0, 1):
            redis.Redis.from_url(self.url.replace("/0", f"/{db}")).flushdb()  # this bench's own server

    def batch(self, n: int, output: str, concurrency: int) -> subprocess.Popen[bytes]:
        tasks = self.root / "in.jsonl"
        tasks.write_text("".join(json.dumps({"id": f"item {i}", "task": f"question {i}"}) + "\n" for i in range(n)))
        return subprocess.Popen(
            [sys.executable, "-m", "shelly_dist.cli.main", "batch", "--tasks", str(tasks), "--output",
             str(self.root / output), "--quiet", "--concurrency", str(concurrency)],
            cwd=self.root, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def cost(self) -> float:
        """Every run's own cost (the run records' usage), in USD."""
        total = 0.0
        for key in self.redis.scan_iter(match=self.prefix + "run:*", count=1000):
            if key.count(":") == self.prefix.count(":") + 1:
                usage = self.redis.hget(key, "usage")
                total += float(json.loads(usage).get("cost_usd", 0)) if usage else 0.0
        return total

    def running(self) -> int:
        return sum(1 for key in self.redis.scan_iter(match=self.prefix + "run:*", count=1000)
                   if key.count(":") == self.prefix.count(":") + 1 and self.redis.hget(key, "status") == "running")

    def replies(self, output: str) -> list[str]:
        lines = [json.loads(x) for x in (self.root / output).read_text().splitlines()]
        return sorted(f"{x['id']}: {x.get('reply')}" for x in lines)

    def close(self) -> None:
        self.stop_workers()
        for proc in self.procs:
            _stop(proc)
        self.redis.close()
        shutil.rmtree(self.root, ignore_errors=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def _finish(proc: subprocess.Popen[bytes], what: str) -> None:
    try:
        _, err = proc.communicate(timeout=STEP)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.wait()
        raise BenchError(f"bench: {NAME}: {what} still running after {STEP:g}s") from exc
    if proc.returncode != 0:
        raise BenchError(f"bench: {NAME}: {what} exited {proc.returncode}:\n{err.decode(errors='replace')[-2000:]}")


def _one(n: int, concurrency: int) -> dict[str, float]:
    """Both batches of one run: the interactive one, then the batch-priced one (held while counted)."""
    with ModelServer(batch_delay=0.5, default=Reply(text="the leaf's answer", usage=USAGE)) as server:
        project = _Project(server.url)
        try:
            project.config(batch=False)
            project.start_workers()
            _finish(project.batch(n, "direct.jsonl", concurrency), "the interactive batch")
            direct_cost, direct_replies = project.cost(), project.replies("direct.jsonl")
            project.stop_workers()
            project.reset()

            project.config(batch=True)
            project.start_workers()
            server.batches.hold()
            proc = project.batch(n, "batched.jsonl", concurrency)
            deadline = time.monotonic() + STEP
            while len(server.batches.submitted) < 2 * concurrency:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise BenchError(f"bench: {NAME}: {len(server.batches.submitted)} of {2 * concurrency} "
                                     "requests reached a vendor batch")
                time.sleep(0.2)
            proc.send_signal(signal.SIGSTOP)  # its own wait for the roots is issue 33's, not counted here
            try:
                time.sleep(SETTLE)  # the last runs to suspend have let go: what is counted is the wait
                held, batches = project.running(), len(server.batches.batches())
                project.redis.config_resetstat()
                t0 = time.monotonic()
                time.sleep(WINDOW)
                calls = sum(int(v["calls"]) for k, v in project.redis.info("commandstats").items()
                            if k not in ("cmdstat_info", "cmdstat_config"))
                rate = calls / (time.monotonic() - t0)
            finally:
                proc.send_signal(signal.SIGCONT)
            server.batches.release()
            _finish(proc, "the batch-priced batch")
            time.sleep(2.0)  # the last deliveries' resumes and reaper checks are over
            project.redis.config_resetstat()
            t0 = time.monotonic()
            time.sleep(WINDOW)
            idle = sum(int(v["calls"]) for k, v in project.redis.info("commandstats").items()
                       if k not in ("cmdstat_info", "cmdstat_config")) / (time.monotonic() - t0)
            return {"ratio": project.cost() / direct_cost if direct_cost else 0.0, "held": float(held),
                    "rate": rate, "idle": idle, "batches": float(batches),
                    "same": float(project.replies("batched.jsonl") == direct_replies),
                    "direct_calls": float(sum(1 for r in server.requests if r.path.endswith("/chat/completions")))}
        finally:
            project.close()


async def measure(b: Bench) -> list[Row]:
    n = 2000 if b.sizes.batch_n >= 1000 else 50
    c = min(n, IN_FLIGHT)
    runs = [await b.step(f"{NAME} run {i}: {n} items twice", 2 * STEP + 120, asyncio.to_thread(_one, n, c))
            for i in range(1, b.runs + 1)]
    same = all(r["same"] == 1.0 for r in runs)
    return [
        Row("13a", f"provider batches: cost of a {n}-item `shelly batch` (an orchestrator and two batch-priced "
            f"children each) over the same batch interactive", "×", [r["ratio"] for r in runs],
            target="≤ 0.55×", limit=("<=", 0.55), on="value",
            note=f"replies identical: {'yes' if same else 'NO'}; {WORKERS} workers × {SLOTS} slots, `shelly batch "
                 f"--concurrency {c}`; the leads' scripted calls cost nothing, so this is the children's share"),
        Row("13b", f"provider batches: runs holding a worker while {2 * c} requests wait in vendor batches", "runs",
            [r["held"] for r in runs], target="0", limit=("<=", 0.0), on="value"),
        Row("13c", f"provider batches: Redis commands/s while {2 * c} requests wait", "cmd/s",
            [r["rate"] for r in runs], "the same pool idle, right after", [r["idle"] for r in runs],
            [r["rate"] / r["idle"] for r in runs if r["idle"]],
            note=f"over {WINDOW:g} s each, `shelly batch` stopped (its wait for its roots is issue 33's); "
                 f"{statistics.median(r['batches'] for r in runs):.0f} vendor batches polled once a second; the "
                 "rest is the workers' own (Celery, reapers, desk ticks)"),
    ]
