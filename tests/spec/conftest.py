"""The spec suite: each scenario runs on both runtimes, as a user runs it, and must behave the same.

``project`` is a project directory (``.shelly/config.yaml`` beside the user's own files) with a
``run`` that executes ``shelly run`` in it: ``embedded`` in one process, or ``pool`` against real
Redis with a real ``shelly worker`` subprocess started from that directory. A scenario writes its
config with ``project.write_config`` and compares what ``shelly run`` printed: the same test body
asserts the same result on both.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..integration.cluster import Cluster

RUN_DEADLINE = 120.0


class Project:
    """A project directory on one runtime (``embedded`` or ``pool``)."""

    def __init__(self, cluster: Cluster, runtime: str) -> None:
        self.cluster = cluster
        self.runtime = runtime
        self.root: Path = cluster.root
        self.worker_pids: list[int] = []
        self.run_pid = 0
        """The process id of the last ``shelly run``."""

    def write_config(self, providers: list[dict[str, Any]], agents: list[dict[str, Any]], **extra: Any) -> None:
        """Write the config; on the pool, point it at the cluster and start one worker (after the
        config and the user's modules exist: the worker imports them at start)."""
        path = self.cluster.write_config(providers, agents, **extra)
        if self.runtime == "embedded":
            import yaml

            config = yaml.safe_load(path.read_text())
            config.pop("distributed")
            path.write_text(yaml.safe_dump(config, sort_keys=False))
            return
        hostname = self.cluster.start_worker("w1")
        self.worker_pids = [self.cluster.workers[hostname].pid]

    def run(self, task: str, *args: str) -> subprocess.CompletedProcess[str]:
        """``shelly run TASK ARGS`` in the project directory, to its end (its pid in ``run_pid``)."""
        proc = self.cluster.popen("run", task, "--quiet", *args)
        self.run_pid = proc.pid
        try:
            out, err = proc.communicate(timeout=RUN_DEADLINE)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"`shelly run` still running after {RUN_DEADLINE}s; stderr:\n{err}\n"
                                 f"{self.cluster.worker_log()}") from exc
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def tool_process(self) -> list[int]:
        """The processes a tool must run in: the worker's on the pool, ``shelly run``'s embedded."""
        return self.worker_pids if self.runtime == "pool" else [self.run_pid]

    def log(self) -> str:
        """The workers' logs (empty embedded), for failure messages."""
        return self.cluster.worker_log()


@pytest.fixture(params=["embedded", "pool"])
def project(request: pytest.FixtureRequest, tmp_path: Path, redis_url: str) -> Iterator[Project]:
    cluster = Cluster(tmp_path, redis_url=redis_url)
    try:
        yield Project(cluster, request.param)
    finally:
        cluster.stop()
