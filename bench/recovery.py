"""12. Recovery: time from ``kill -9`` of the worker running a step to the run continuing on
another worker, on DEFAULT lease and visibility settings, with the Redis broker and with RabbitMQ.

Each run: two ``shelly worker`` processes, a coordinator delegating to a child whose second model
call hangs; the worker holding the child is killed with SIGKILL, and the figure is the time until
the loopback model server receives the child's next request from the other worker (the run's lease
lapses, a reaper re-enqueues it, another worker claims it and rebuilds it from its journal). The
scenario builds its own throwaway projects (one per broker) and reaps them like :class:`Stack`.
Run alone with ``python -m bench --only recovery``.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import redis
import yaml

from bench.cluster import refuse_cluster
from bench.context import Bench
from bench.harness import REDIS_URL, START_TIMEOUT, BenchError, Stack, _clean_env
from bench.report import Row
from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply

NAME = "recovery"
RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672//"
RECOVERY_STEP = 420.0
"""Seconds one kill may take end to end (its own waits are bounded by 300 s and 120 s)."""
BROKER_DB = 8
"""The Redis broker's database for this scenario (the other scenarios use 7, tests use 5)."""


class _Project:
    """One throwaway project on one broker: config, two workers, cleanup of keys and queue."""

    def __init__(self, broker_url: str, model_url: str) -> None:
        self.id = uuid.uuid4().hex[:8]
        self.root = Path(tempfile.mkdtemp(prefix="shelly-recovery-"))
        self.queue, self.prefix, self.broker_url = f"recovery-{self.id}", f"shelly-recovery:{self.id}:", broker_url
        self.redis = redis.Redis.from_url(REDIS_URL, decode_responses=True)
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        config = {
            "providers": [{"name": "lead", "kind": "scripted", "model": "s", "script": {"lead": [
                              {"tool_calls": [{"name": "delegate", "arguments": {"tasks": [
                                  {"agent": "child", "task": "work", "context": ""}]}}]}, "lead done"]}},
                          {"name": "mock", "kind": "openai", "model": "m", "base_url": model_url, "api_key": "k",
                           "rate_limit": {"max_retries": 0}}],
            "agents": [{"name": "lead", "provider": "lead", "options": {"max_delegation_depth": 1}},
                       {"name": "child", "provider": "mock"}],
            "distributed": {"broker_url": broker_url, "redis_url": REDIS_URL, "queue": self.queue,
                            "key_prefix": self.prefix},  # every duration at its default
        }
        (self.root / ".shelly").mkdir()
        (self.root / ".shelly" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))

    def start_worker(self, name: str) -> None:
        beat = self.root / f"{name}.beat"
        self.workers[name] = subprocess.Popen(
            [sys.executable, "-m", "shelly_dist.cli.main", "worker", "--hostname", f"{name}@{self.id}",
             "--heartbeat-file", str(beat), "--loglevel", "WARNING"],
            cwd=self.root, env=_clean_env(), stdout=(self.root / f"{name}.log").open("wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while not beat.exists():
            if self.workers[name].poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"bench: recovery worker {name} did not start")
            time.sleep(0.1)

    def holder(self) -> str:
        """The worker (short name) whose lease holds the child run, once it has one."""
        for key in self.redis.scan_iter(match=f"{self.prefix}run:*"):
            if key.count(":") == 3 and self.redis.hget(key, "agent") == "child":
                worker = self.redis.hget(key, "worker") or ""
                if worker:
                    return worker.split("@", 1)[0]
        return ""

    def close(self) -> None:
        for proc in self.workers.values():
            Stack._stop(proc)
        keys = list(self.redis.scan_iter(match=f"{self.prefix}*", count=1000))
        if keys:
            self.redis.delete(*keys)
        if self.broker_url.startswith("redis"):
            broker = redis.Redis.from_url(self.broker_url)
            for key in broker.scan_iter(match=f"*{self.queue}*", count=1000):
                broker.delete(key)
            broker.close()
        else:
            from kombu import Connection

            with Connection(self.broker_url, connect_timeout=5) as conn:
                conn.channel().queue_delete(self.queue)
        self.redis.close()
        shutil.rmtree(self.root, ignore_errors=True)


def _one(broker_url: str) -> float:
    """One kill: seconds from SIGKILL to the child's next model request on the other worker."""
    state: dict[str, Any] = {"killed": None}
    resumed = threading.Event()
    resumed_at: list[float] = []

    def respond(req: RecordedRequest) -> Reply:
        turns = sum(1 for m in req.body.get("messages", []) if m.get("role") == "assistant")
        if turns == 0:
            return Reply(text="", tool_calls=[{"name": "not_a_tool", "arguments": {}}])
        if state["killed"] is None:
            return Reply(text="never", delay=600)
        resumed_at.append(req.arrived)
        resumed.set()
        return Reply(text="child done")

    with ModelServer(format="openai", responder=respond) as server:
        project = _Project(broker_url, server.url)
        coordinator = None
        try:
            project.start_worker("a")
            project.start_worker("b")
            coordinator = subprocess.Popen([sys.executable, "-m", "shelly_dist.cli.main", "run", "go", "--json"],
                                           cwd=project.root, env=_clean_env(), stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL)
            server.wait_for_requests(2, timeout=120)
            holder = project.holder()
            if holder not in project.workers:
                raise BenchError("bench: recovery: no worker holds the child")
            state["killed"] = time.monotonic()
            project.workers[holder].send_signal(signal.SIGKILL)
            project.workers[holder].wait(10)
            if not resumed.wait(300):
                raise BenchError("bench: recovery: the run did not continue within 300 s")
            coordinator.wait(120)
            return resumed_at[0] - state["killed"]
        finally:
            if coordinator is not None and coordinator.poll() is None:
                coordinator.kill()
                coordinator.wait(10)
            project.close()


async def measure(b: Bench) -> list[Row]:
    refuse_cluster(REDIS_URL, NAME, "its Redis broker is database 7 of BENCH_REDIS_URL and it reads the journals "
                   "with a client of one server")
    base = REDIS_URL.rsplit("/", 1)[0]
    rows = []
    for key, label, url in (("12a", "Redis broker", f"{base}/{BROKER_DB}"), ("12b", "RabbitMQ", RABBITMQ_URL)):
        values = [await b.step(f"recovery ({label}) run {i}: kill -9 until the run continues", RECOVERY_STEP,
                               asyncio.to_thread(_one, url)) for i in range(1, b.runs + 1)]
        rows.append(Row(key, f"recovery: `kill -9` mid-step → run continues ({label}, default settings)", "s",
                        values, note="lease 10 s + reap interval 2 s"))
    return rows
