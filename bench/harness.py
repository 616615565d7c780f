"""What every scenario stands on: a throwaway project, model servers, worker processes, cleanup.

One :class:`Stack` per ``python -m bench`` invocation. It owns a temporary project directory with a
config (written once, holding the agents of every scenario), a unique Celery queue and Redis key
prefix, the broker on its own Redis database (:data:`BROKER_DB`), and every subprocess it starts:
the loopback model servers (:mod:`bench.model`), ``shelly worker`` processes and the raw Celery
reference worker. :meth:`Stack.close` reaps them all and deletes only this stack's keys, and it
runs on failure and on Ctrl-C/SIGTERM too (``__main__`` turns SIGTERM into ``KeyboardInterrupt``).
Scenarios ask for the workers they need with :meth:`Stack.use_workers`, which stops the others, so
no scenario's tasks are taken by another scenario's worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
import redis
import yaml

from bench.cluster import delete_matching, is_cluster, journal_nodes
from bench.procs import BenchError, spawn_model
from shelly_dist.chats import Role
from shelly_dist.engine import Engine
from shelly_dist.engine.sessions import new_session_id
from shelly_dist.runtime import RunOutcome

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
"""The Redis the bench uses; ``BENCH_REDIS_URL`` points it at a redis-server of one's own, where
row 6's ``MONITOR`` sees no other engineer's traffic, or at a Redis Cluster for the journals
(``redis+cluster://host:port``, :mod:`bench.cluster`; ``BENCH_BROKER_URL`` is then required)."""
BROKER_DB = 7
"""The broker's Redis database, used only by the bench (tests use 5; state stays in 0 with a prefix)."""


def broker_url() -> str:
    """The broker: ``BENCH_BROKER_URL`` (a redis-server of its own, so the scaling row can tell the
    broker's CPU from the journals'; row 6 then counts the journals' server only), else database 7
    of the bench's Redis. A cluster cannot be the broker, so a cluster ``BENCH_REDIS_URL`` without
    ``BENCH_BROKER_URL`` is a ``BenchError``."""
    own = os.environ.get("BENCH_BROKER_URL")
    if own:
        return own
    if is_cluster(REDIS_URL):
        raise BenchError(f"bench: BENCH_BROKER_URL is required when BENCH_REDIS_URL is a cluster ({REDIS_URL}): "
                         "the Celery broker cannot be a Redis Cluster")
    return f"{REDIS_URL.rsplit('/', 1)[0]}/{BROKER_DB}"


START_TIMEOUT = 90.0
ROOT = Path(__file__).resolve().parent.parent


async def wait_for(condition: Callable[[], Awaitable[Any]], within: float, what: str, interval: float = 0.02) -> Any:
    """Await ``condition`` until it returns something truthy; ``BenchError`` after ``within`` s."""
    deadline = time.monotonic() + within
    while True:
        value = await condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise BenchError(f"bench: timed out after {within:g}s waiting for {what}")
        await asyncio.sleep(interval)


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHELLY_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Stack:
    """The bench's processes and Redis keys (see the module docstring). Always :meth:`close` it."""

    def __init__(self, profile: Path | None = None, wrapper: Callable[[str], list[str]] | None = None) -> None:
        self.broker_url = broker_url()  # first: these two may fail, before anything needs cleaning up
        self.journals = journal_nodes(REDIS_URL)
        """A plain client of each server holding the journals (each primary of a cluster)."""
        self.profile = profile
        """Where workers write their samples (:mod:`bench.sampler`), when profiling."""
        self.wrapper = wrapper
        """Runs each worker under a measuring module (``bench.heap``, ``bench.threadcpu``,
        ``bench.timeline``): for a worker's name, the arguments put before ``shelly_dist.cli.main``
        (``["-m", "bench.heap", "--worker", DIR]``); the bench is then on ``PYTHONPATH``."""
        self.id = uuid.uuid4().hex[:8]
        self.root = Path(tempfile.mkdtemp(prefix="shelly-bench-"))
        (self.root / ".shelly").mkdir()
        self.queue = f"bench-{self.id}"
        self.raw_queue = f"bench-raw-{self.id}"
        self.prefix = f"shelly-bench:{self.id}:"
        self.broker = redis.Redis.from_url(self.broker_url, decode_responses=True)
        self.env = _clean_env()
        self.models: dict[str, str] = {}
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.concurrency: dict[str, int] = {}
        self._others: list[subprocess.Popen[bytes]] = []
        self.raw_task_ids: list[str] = []
        self.config_path = self.root / ".shelly" / "config.yaml"

    # -- config ------------------------------------------------------------------------------

    def write_config(self, providers: list[dict[str, Any]], agents: list[dict[str, Any]]) -> Path:
        config = {
            "providers": providers,
            "agents": agents,
            "distributed": {
                "broker_url": self.broker_url,
                "redis_url": REDIS_URL,
                "queue": self.queue,
                "key_prefix": self.prefix,
                "step_time_limit": 120,
                "retention": 3600,
            },
        }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        embedded = self.root / "embedded" / ".shelly"
        embedded.mkdir(parents=True, exist_ok=True)
        (embedded / "config.yaml").write_text(
            yaml.safe_dump({"providers": providers, "agents": agents}, sort_keys=False))
        return self.config_path

    @contextlib.asynccontextmanager
    async def engine(self, *, embedded: bool = False) -> AsyncIterator[Engine]:
        """The coordinator: an engine in this process (Celery runtime, or local with ``embedded``)."""
        shelly_dir = (self.root / "embedded" / ".shelly") if embedded else (self.root / ".shelly")
        engine = await Engine.open(shelly_dir / "config.yaml", shelly_dir=shelly_dir, env=self.env)
        try:
            yield engine
        finally:
            await engine.aclose()

    # -- model servers -----------------------------------------------------------------------

    def start_model(self, name: str, latency: float, *, hold: bool = False) -> str:
        """Start a :mod:`bench.model` server answering after ``latency`` s; returns its URL."""
        _, self.models[name] = spawn_model(name, latency, self.env, self._others, hold=hold)
        return self.models[name]

    async def model_stats(self, name: str, action: str = "stats") -> dict[str, int]:
        """``{"requests", "inflight"}`` of model ``name``; ``action="release"`` frees held calls."""
        async with httpx2.AsyncClient(timeout=10) as client:
            response = await client.get(f"{self.models[name]}/{action}")
        return dict(response.json())

    # -- workers -------------------------------------------------------------------------------

    async def use_workers(self, wanted: dict[str, int]) -> None:
        """Make exactly ``wanted`` (name → concurrency) run: stop the others, start the missing."""
        for name in [n for n in self.workers if self.concurrency.get(n) != wanted.get(n)]:
            await asyncio.to_thread(self._stop, self.workers.pop(name))
            self.concurrency.pop(name, None)
        missing = [n for n in wanted if n not in self.workers]
        beats = {n: self.root / f"{n}.heartbeat" for n in missing}
        for name in missing:
            await asyncio.to_thread(self._spawn_worker, name, wanted[name], beats[name])
        for name in missing:
            proc = self.workers[name]

            async def ready(proc: subprocess.Popen[bytes] = proc, beat: Path = beats[name]) -> bool:
                return await asyncio.to_thread(beat.exists) or proc.poll() is not None

            await wait_for(ready, START_TIMEOUT, f"worker {name}", interval=0.1)
            if proc.poll() is not None:
                raise BenchError(f"bench: worker {name} exited:\n{self.log(name)}")

    def _spawn_worker(self, name: str, concurrency: int, beat: Path) -> None:
        beat.unlink(missing_ok=True)
        log = (self.root / f"{name}.log").open("wb")
        command, env = [sys.executable, "-m", "shelly_dist.cli.main"], self.env
        if self.profile is not None:
            out = self.profile / f"worker-{len(list(self.profile.glob('worker-*'))):02d}-{name}.collapsed"
            command = [sys.executable, "-m", "bench.sampler", str(out), "-m", "shelly_dist.cli.main"]
            env = {**env, "PYTHONPATH": str(ROOT)}
        elif self.wrapper is not None:
            command = [sys.executable, *self.wrapper(name), "shelly_dist.cli.main"]
            env = {**env, "PYTHONPATH": str(ROOT)}
        self.workers[name] = subprocess.Popen(
            [*command, "worker", "--concurrency", str(concurrency),
             "--hostname", f"{name}@{self.id}", "--heartbeat-file", str(beat), "--loglevel", "WARNING"],
            cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
        self.concurrency[name] = concurrency

    def worker_pid(self, name: str) -> int:
        return self.workers[name].pid

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def tails(self) -> str:
        """The last lines of every running worker's log, to go with an error."""
        return "".join(f"\n--- worker {name} (last lines) ---\n{self.log(name)[-1200:]}" for name in self.workers)

    def start_raw_worker(self, concurrency: int) -> None:
        """The reference Celery worker (:mod:`bench.raw_celery`) on its own queue."""
        env = {**self.env, "BENCH_RAW_BROKER": self.broker_url, "BENCH_RAW_BACKEND": self.broker_url,
               "BENCH_RAW_QUEUE": self.raw_queue}
        log = (self.root / "raw.log").open("wb")
        self._others.append(subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "bench.raw_celery", "worker", "--pool=threads",
             f"--concurrency={concurrency}", f"--queues={self.raw_queue}", f"--hostname=raw@{self.id}",
             "--loglevel=WARNING", "--without-mingle", "--without-gossip"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        ))

    # -- cleanup -------------------------------------------------------------------------------

    @staticmethod
    def _stop(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def close(self) -> None:
        """Reap every process and delete this stack's keys. Idempotent; safe after a failure."""
        procs = [*self.workers.values(), *self._others]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            self._stop(proc)
        self.workers.clear()
        self._others.clear()
        try:
            self._delete_keys()
        finally:
            for client in self.journals:
                client.close()
            self.broker.close()
            shutil.rmtree(self.root, ignore_errors=True)

    def _delete_keys(self) -> None:
        for client, pattern in (*((node, f"{self.prefix}*") for node in self.journals),
                                (self.broker, f"*{self.queue}*"), (self.broker, f"*{self.raw_queue}*")):
            delete_matching(client, pattern)
        metas = [f"celery-task-meta-{t}" for t in self.raw_task_ids]
        for i in range(0, len(metas), 500):
            self.broker.delete(*metas[i:i + 500])


async def submit_once(engine: Engine, agent: str, text: str = "go") -> None:
    """One top-level run of ``agent`` submitted to the pool (its loop runs on a worker, as a
    ``shelly batch`` item's does), waited for; ``BenchError`` unless it ended done."""
    runtime: Any = engine.runtime  # the Celery runtime: submit and wait are the pool's
    run_id = await runtime.submit(agent, text, session=new_session_id())
    record = await runtime.wait(run_id)
    if record.status != "done" or record.error:
        raise BenchError(f"bench: {agent}: run {run_id} on the pool ended {record.status}: {record.error[:500]}")


async def delegate_once(engine: Engine, agent: str, text: str = "go") -> RunOutcome:
    """One top-level run of ``agent`` in a fresh session; ``BenchError`` if any child failed."""
    session = engine.session(agent=agent, persist=False)
    outcome = await session.send(text)
    for message in session.agent.chat.messages():
        if message.role != Role.TOOL:
            continue
        for result in message.tool_results():
            entries = json.loads(result.content) if result.content.startswith("[") else []
            failed = [e for e in entries if isinstance(e, dict) and e.get("error")]
            if result.is_error or failed:
                raise BenchError(f"bench: {agent}: a delegation failed: {result.content[:500]}")
    return outcome
