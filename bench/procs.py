"""The few process helpers every bench module needs, light enough for a measurement subprocess.

:mod:`bench.transport` runs each client measurement in a fresh interpreter and reads its RSS, so
what it imports must not load the HTTP libraries or shelly itself; this module imports neither.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


class BenchError(RuntimeError):
    """A scenario could not produce a valid measurement (a run failed, a process died, a step overran)."""


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` (``VmRSS`` from ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise BenchError(f"bench: no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used so far (``/proc/PID/stat``, clock-tick resolution)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spawn_model(name: str, latency: float, env: dict[str, str], into: list[subprocess.Popen[bytes]], *,
                hold: bool = False) -> tuple[subprocess.Popen[bytes], str]:
    """Start a :mod:`bench.model` server in its own process (appended to ``into``, for reaping)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.model", "--latency", str(latency), *(["--hold"] if hold else [])],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
    )
    into.append(proc)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if not line.startswith("listening on "):
        raise BenchError(f"bench: model server {name} did not start: {line!r}")
    return proc, line.split()[-1]
