"""Fixtures of the chaos suite: a private Redis per test (state and broker), a cluster on it with
DEFAULT runtime settings, the workload's model server, and a pool of workers that faults can kill.

Everything a test starts is reaped in a finalizer, even when the test fails.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chaos.workload import Workload
from tests.integration.cluster import Cluster, wait_until
from tests.integration.support.redis_server import RedisServer

pytestmark = pytest.mark.integration


class ChaosCluster(Cluster):
    """A :class:`Cluster` whose config carries only what locates Redis, the broker and the queue:
    every runtime setting (lease, step limit, visibility timeout, retention) is the default."""

    def write_default_config(self, workload: Workload, distributed: dict[str, Any] | None = None) -> Path:
        config = {
            "providers": workload.providers(),
            "agents": workload.agents(),
            "entry_agent": "lead",
            "permissions": workload.permissions(),
            "distributed": {"broker_url": self.broker_url, "redis_url": self.redis_url, "queue": self.queue,
                            "key_prefix": self.prefix, **(distributed or {})},
        }
        path = self.root / ".shelly" / "config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def batch_input(self, n: int) -> Path:
        path = self.root / "in.jsonl"
        path.write_text("".join(json.dumps({"id": f"item-{i}", "task": f"job {i}"}) + "\n" for i in range(n)))
        return path


class WorkerPool:
    """Keeps ``size`` workers of a cluster running; :meth:`kill_one` is ``kill -9`` of a random one
    and starts a replacement, as a supervisor (systemd, Kubernetes) would."""

    def __init__(self, cluster: Cluster, size: int, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self.started = 0
        self.killed: list[str] = []
        self.live = self._start(size)

    def _start(self, n: int = 1) -> list[str]:
        """Start ``n`` workers at once and wait until each is ready."""
        names = [f"w{self.started + i + 1}" for i in range(n)]
        self.started += n
        return self.cluster.start_workers(*names)

    def exited(self) -> list[str]:
        """The workers that exited on their own (nothing here restarts them)."""
        return [h for h in self.live if self.cluster.workers[h].poll() is not None]

    def kill_one(self) -> str:
        victim = self.rng.choice(self.live)
        self.cluster.kill_worker(victim)
        self.live.remove(victim)
        self.killed.append(victim)
        self.live += self._start()
        return victim


class Faults:
    """Runs a fault schedule in a thread until the workload ends (``stop``), then stops at once."""

    def __init__(self) -> None:
        self.stopped = threading.Event()
        self.outage = threading.Event()
        """Set while Redis or the broker connection is down (a schedule sets and clears it)."""
        self.next_outage = float("inf")
        """When (``time.monotonic()``) the schedule's next outage begins."""
        self.log: list[str] = []
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def run(self, schedule: Callable[[Faults], None]) -> None:
        def body() -> None:
            try:
                schedule(self)
            except BaseException as exc:  # reported by the test after the workload
                self.error = exc

        self._thread = threading.Thread(target=body, name="chaos-faults", daemon=True)
        self._thread.start()

    def quiet(self, margin: float) -> bool:
        """Whether no outage is under way or due within ``margin`` seconds: a ``shelly run`` that
        starts while Redis cannot be reached fails at once by design (nothing written; it says
        to run it again), so a soak starts its runs outside outages and lets them meet one mid-way."""
        return not self.outage.is_set() and self.next_outage - time.monotonic() > margin

    def pause(self, seconds: float) -> bool:
        """Wait ``seconds`` between faults; False once the workload has ended."""
        return not self.stopped.wait(seconds)

    def stop(self) -> None:
        self.stopped.set()
        if self._thread is not None:
            self._thread.join(60)
        if self.error is not None:
            raise AssertionError(f"the fault schedule failed: {self.error!r}") from self.error


@pytest.fixture
def chaos_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def chaos_cluster(tmp_path: Path, chaos_redis: RedisServer) -> Iterator[ChaosCluster]:
    project = tmp_path / "project"
    project.mkdir()
    c = ChaosCluster(project, redis_url=chaos_redis.url(0), broker_url=chaos_redis.url(1))
    try:
        yield c
    finally:
        if chaos_redis.paused:
            chaos_redis.resume()
        if chaos_redis.proc is None or chaos_redis.proc.poll() is not None:
            chaos_redis.start()
        c.stop()


@pytest.fixture
def workload(tmp_path: Path) -> Iterator[Workload]:
    w = Workload(tmp_path / "tool-runs.txt")
    w.server.start()
    try:
        yield w
    finally:
        w.server.stop()


@pytest.fixture
def faults() -> Iterator[Faults]:
    f = Faults()
    try:
        yield f
    finally:
        f.stopped.set()


__all__ = ["ChaosCluster", "Faults", "WorkerPool", "wait_until"]
