"""``shelly`` starts in a fraction of a second (issue 37, STYLE lesson 21), measured in CPU seconds
(user + system) so that a loaded machine does not count: ``--help`` within 0.3 s, a blackboard read
(``shelly state get`` against the real Redis) within 0.5 s.

Each figure is the least of up to ten runs (after one warm-up run that writes the bytecode caches:
a pip-installed package has them; ``PYTHONDONTWRITEBYTECODE`` is dropped for that): load only ever
adds CPU time (a busy core's shared caches), so the least run is the program's own cost, and the
runs stop at the first within the limit. On a quiet machine ``--help`` takes about 0.08 s and the
read about 0.3 s; at a load average of 11-18 on two cores, 0.09-0.11 s and 0.36-0.53 s. A return to
importing everything (1.3 s) fails every run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .cluster import Cluster

SHELLY = [sys.executable, "-m", "shelly_dist.cli.main"]


def cpu_seconds(args: list[str], *, cwd: Path, env: dict[str, str], within: float, runs: int = 10) -> float:
    """The least user + system CPU time of ``shelly ARGS`` over at most ``runs`` runs (after a
    warm-up), stopping at the first ``within`` seconds; each run must exit 0."""
    env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    best = float("inf")
    for attempt in range(runs + 1):
        if best <= within:
            break
        proc = subprocess.Popen([*SHELLY, *args], cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        assert proc.returncode == 0, proc.stderr.read().decode() if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()
        if attempt:
            best = min(best, usage.ru_utime + usage.ru_stime)
    return best


def test_help_costs_at_most_three_tenths_of_a_cpu_second(tmp_path: Path) -> None:
    assert cpu_seconds(["--help"], cwd=tmp_path, env=dict(os.environ), within=0.3) <= 0.3


def test_a_blackboard_read_costs_at_most_half_a_cpu_second(cluster: Cluster) -> None:
    cluster.write_config([{"name": "m", "kind": "scripted", "model": "x"}], [{"name": "a", "provider": "m"}])
    session = "0123456789abcdef"
    assert cluster.shelly("state", "set", "colour", '"blue"', "--session", session).returncode == 0
    read = ["state", "get", "colour", "--session", session]
    assert cpu_seconds(read, cwd=cluster.root, env=cluster.env(), within=0.5) <= 0.5
