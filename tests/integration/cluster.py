"""A throwaway shelly cluster for integration tests: a project directory with a config, real
``shelly worker`` subprocesses, and the CLI run as subprocesses against them.

Every cluster gets its own queue and Redis key prefix, and the broker uses its own Redis database,
so clusters never see each other's work. Workers are always reaped, even when a test fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
import yaml

from shelly_dist.redisio.connection import sync_client
from shelly_dist.testing.model_server import ModelServer

BROKER_DB = 5 + int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % 10
"""The Redis database the broker uses in tests (state and journals stay in db 0 with a prefix): one
per xdist worker (5-14). kombu keeps one unacknowledged index per database, and every worker on it
restores each message older than *its* visibility timeout: a cluster with the tests' 15 s one
re-delivered the messages a neighbouring test's workers held on default settings (900 s)."""

DEFAULT_TIMING = {"step_time_limit": 600, "visibility_timeout": 900}
"""The runtime's own defaults, for tests of a guarantee on default settings (``write_config``
otherwise shortens them for tests)."""


def wait_until(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll ``condition`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Cluster:
    """A project in ``root`` whose config points at the real Redis (and optionally RabbitMQ)."""

    def __init__(self, root: Path, *, redis_url: str, broker_url: str | None = None) -> None:
        self.root = root
        self.id = uuid.uuid4().hex[:8]
        self.queue = f"test-{self.id}"
        self.prefix = f"shelly-test:{self.id}:"
        base = redis_url.rsplit("/", 1)[0]
        self.redis_url = redis_url
        self.broker_url = broker_url or f"{base}/{BROKER_DB}"
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}
        self.redis: Any = sync_client(redis_url, decode_responses=True)  # a RedisCluster for a cluster URL
        self.wrapper: list[str] = []
        """argv prepended to every shelly process (e.g. a read-only mount around it)."""
        (root / ".shelly").mkdir(parents=True, exist_ok=True)

    # -- config ------------------------------------------------------------------------------

    def write_config(
        self,
        providers: list[dict[str, Any]],
        agents: list[dict[str, Any]],
        *,
        distributed: dict[str, Any] | None = None,
        **extra: Any,
    ) -> Path:
        """Write ``.shelly/config.yaml``; ``distributed`` overrides this cluster's defaults."""
        config = {
            "providers": providers,
            "agents": agents,
            "distributed": {
                "broker_url": self.broker_url,
                "redis_url": self.redis_url,
                "queue": self.queue,
                "key_prefix": self.prefix,
                "step_time_limit": 10,
                "visibility_timeout": 15,
                **(distributed or {}),
            },
            **extra,
        }
        path = self.root / ".shelly" / "config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    # -- processes ---------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("SHELLY_BROKER_URL", None)
        env.pop("SHELLY_REDIS_URL", None)
        env.pop("SHELLY_CONFIG", None)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def shelly(self, *args: str, input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``shelly ARGS`` in the project directory and return the finished process."""
        return subprocess.run(
            [*self.wrapper, sys.executable, "-m", "shelly_dist.cli.main", *args],
            cwd=self.root, env=self.env(), input=input, capture_output=True, text=True, timeout=timeout,
        )

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*self.wrapper, sys.executable, "-m", "shelly_dist.cli.main", *args],
            cwd=self.root, env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    def start_worker(
        self, name: str, *, concurrency: int = 8, pool: str = "threads", env: dict[str, str] | None = None,
        may_die: bool = False, args: tuple[str, ...] = (),
    ) -> str:
        """Start ``shelly worker`` as ``name@<cluster>`` (``env`` added to its environment); returns
        the hostname once it is ready. ``may_die``: the test expects the worker to die (a task that
        kills it may arrive before its first heartbeat), so an exit is not a failure here."""
        return self.start_workers(name, concurrency=concurrency, pool=pool, env=env, may_die=may_die, args=args)[0]

    def start_workers(
        self, *names: str, concurrency: int = 8, pool: str = "threads", env: dict[str, str] | None = None,
        may_die: bool = False, args: tuple[str, ...] = (),
    ) -> list[str]:
        """Start several workers at once (as :meth:`start_worker`, ``args`` added to each's
        ``shelly worker`` options), then wait until each is ready."""
        started = []
        for name in names:
            hostname = f"{name}@{self.id}"
            log = self.root / f"{name}.log"
            self.logs[hostname] = log
            self.workers[hostname] = subprocess.Popen(
                [*self.wrapper, sys.executable, "-m", "shelly_dist.cli.main", "worker", "--concurrency",
                 str(concurrency), "--pool", pool, "--hostname", hostname, "--heartbeat-file",
                 str(self.root / f"{name}.heartbeat"), "--loglevel", "INFO", *args],
                cwd=self.root, env={**self.env(), **(env or {})}, stdout=log.open("wb"), stderr=subprocess.STDOUT,
            )
            started.append((name, hostname))
        for name, hostname in started:
            beat, proc = self.root / f"{name}.heartbeat", self.workers[hostname]
            wait_until(lambda b=beat, p=proc: b.exists() or p.poll() is not None, 60, f"worker {hostname}")
            if proc.poll() is not None and not may_die:
                raise AssertionError(f"worker {hostname} exited:\n{self.logs[hostname].read_text()[-3000:]}")
        return [hostname for _, hostname in started]

    def kill_worker(self, hostname: str) -> None:
        """``kill -9`` the worker: no warm shutdown, no acknowledgement of what it held."""
        proc = self.workers[hostname]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def stop(self) -> None:
        for proc in self.workers.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.workers.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self._cleanup_redis()
        self.redis.close()

    def _cleanup_redis(self) -> None:
        keys = list(self.redis.scan_iter(match=self.prefix + "*", count=1000))
        if keys:
            self.redis.delete(*keys)
        if self.broker_url.startswith("redis"):
            broker = redis.Redis.from_url(self.broker_url)
            for key in broker.scan_iter(match=f"*{self.queue}*", count=1000):
                broker.delete(key)
            broker.close()
        elif self.broker_url.startswith("amqp"):
            from kombu import Connection

            with Connection(self.broker_url, connect_timeout=5) as conn:
                channel = conn.channel()
                for name in (self.queue, f"{self.queue}.reply"):
                    try:
                        channel.queue_delete(name)
                    except Exception:
                        channel = conn.channel()

    def run_record(self, agent: str, timeout: float = 60) -> str:
        """The key of the first run record of ``agent`` (a run of the tree, not its root's other
        keys), waited for up to ``timeout`` seconds."""
        return wait_until(
            lambda: next((r for r in self.redis.scan_iter(match=self.prefix + "run:*")
                          if r.count(":") == 3 and self.redis.hget(r, "agent") == agent), None),
            timeout, f"the run record of {agent}")

    def worker_log(self) -> str:
        return "\n".join(f"--- {h}\n{p.read_text()[-4000:]}" for h, p in self.logs.items() if p.exists())

    # -- reading Redis ------------------------------------------------------------------------

    def session_ids(self) -> list[str]:
        """Sessions that have runs in this cluster's Redis (waits until there is one)."""

        def found() -> list[str]:
            keys = list(self.redis.scan_iter(match=f"{self.prefix}s:*:runs"))  # every node of a cluster
            return [k[len(self.prefix) + 3 : -len("}:runs")] for k in keys]

        return wait_until(found, 90, "a session with runs")

    def runs(self, session: str) -> list[dict[str, str]]:
        out = self.shelly("runs", "--session", session, "--json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def events(self, session: str) -> list[dict[str, Any]]:
        out = self.shelly("events", "--session", session, "--json")
        assert out.returncode == 0, out.stderr
        return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def scripted(name: str = "team", **scripts: list[Any]) -> dict[str, Any]:
    """A scripted provider entry with per-agent scripts."""
    return {"name": name, "kind": "scripted", "model": "script", "script": scripts}


def delegate(*tasks: tuple[str, str]) -> dict[str, Any]:
    return {"tool_calls": [{"name": "delegate", "arguments": {
        "tasks": [{"agent": a, "task": t, "context": ""} for a, t in tasks]}}]}


def complete(summary: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "task_complete", "arguments": {"status": "completed", "summary": summary}}]}


NEVER_IN_TIME = 300.0
"""Seconds the slow children's model takes to answer: longer than any test waits."""


def slow_team(cluster: Cluster, server: ModelServer, tasks: tuple[str, ...] = ("one", "two")) -> None:
    """A lead delegating to a child per task (two by default), whose model call outlasts the test.
    The step time limit and visibility timeout are the runtime's defaults, not the cluster's 10 s
    and 15 s: under load
    the signal or ``shelly cancel`` can come more than 10 s after the children's model calls, and
    the children then failed on their time limit instead of being canceled."""
    cluster.write_config(
        [scripted("lead", lead=[delegate(*(("slow", task) for task in tasks)), "unreachable"]),
         {"name": "mock", "kind": "openai", "model": "gpt-test", "base_url": server.url, "api_key": "k",
          "rate_limit": {"max_retries": 0}}],
        [{"name": "lead", "provider": "lead", "options": {"max_delegation_depth": 1}},
         {"name": "slow", "provider": "mock"}],
        distributed={"step_time_limit": 600, "visibility_timeout": 660},
    )
