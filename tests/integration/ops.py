"""Helpers for the operations tests: a delegating team, extra processes run in a cluster's project
directory with their output in a log file, and Flower's HTTP API.

Processes here log to files (never to pipes nobody reads, which fill and stall a chatty server)
and are always reaped by :class:`Processes`, even when a test fails.
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from .cluster import Cluster, complete, delegate, scripted, wait_until

SHELLY = [sys.executable, "-m", "shelly_dist.cli.main"]
CELERY = [sys.executable, "-m", "celery", "-A", "shelly_dist.runtime.celery_app"]
FLOWER_AUTH = "ops:s3cret"


def delegating_team(cluster: Cluster, *, child_delay: float = 0.0) -> None:
    """``lead`` delegates one task to ``helper``, which completes it (after ``child_delay`` s)."""
    child: dict[str, Any] = complete("helped with {task}")
    if child_delay:
        child["delay"] = child_delay
    cluster.write_config(
        [scripted(lead=[delegate(("helper", "inspect the logs")), "lead done"], helper=[child])],
        [{"name": "lead", "description": "delegates", "options": {"max_delegation_depth": 1}},
         {"name": "helper", "description": "helps"}],
    )


def run_json(cluster: Cluster, task: str = "go", timeout: float = 120) -> dict[str, Any]:
    out = cluster.shelly("run", task, "--json", timeout=timeout)
    assert out.returncode == 0, f"stdout:{out.stdout}\nstderr:{out.stderr}\n{cluster.worker_log()}"
    return json.loads(out.stdout)


class Processes:
    """Subprocesses started by one test, each logging to ``<root>/<name>.log``; reaped on close."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = self.cluster.root / f"{name}.log"
        proc = subprocess.Popen(
            argv, cwd=self.cluster.root, env={**self.cluster.env(), **(env or {})},
            stdout=log.open("wb"), stderr=subprocess.STDOUT,
        )
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        path = self.cluster.root / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop(self, name: str, timeout: float = 30) -> int:
        """SIGTERM ``name`` and wait for it to exit; returns its exit code."""
        proc = self.procs[name]
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def http_get(url: str, auth: str | None = None, timeout: float = 10) -> tuple[int, Any]:
    """``(status, body)`` of a GET (JSON parsed when it is JSON), with optional ``user:password`` basic auth."""
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read().decode()
            is_json = "json" in (response.headers.get("Content-Type") or "")
            return response.status, json.loads(body) if is_json and body else body
    except urllib.error.HTTPError as exc:
        return exc.code, None


def wait_for_http(url: str, proc: subprocess.Popen[bytes], what: str, timeout: float = 60) -> None:
    """Wait until ``url`` answers any HTTP status (the server is up) or ``proc`` has exited."""

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode} before serving")
        try:
            http_get(url, timeout=2)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False
        return True

    wait_until(up, timeout, what, interval=0.2)


def beat_path(cluster: Cluster, name: str) -> Path:
    """The heartbeat file :meth:`Cluster.start_worker` gives worker ``name``."""
    return cluster.root / f"{name}.heartbeat"
