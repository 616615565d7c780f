"""The benchmark suite runs end to end at a tiny size, so it cannot rot (no timing assertion).

The quick bench starts some thirty processes: about 30 s on an idle 2-core machine, two minutes
under load, hence the generous deadlines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.report import EXPECTED_ROWS

from .own_redis import own_redis

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(360)
def test_quick_bench_prints_every_row_of_the_table(redis_url: str):
    out = subprocess.run([sys.executable, "-m", "bench", "--quick", "--runs", "1"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"stdout:\n{out.stdout}\nstderr:\n{out.stderr[-4000:]}"
    keys = [line.split("|")[1].strip() for line in out.stdout.splitlines() if line.startswith("| ")]
    assert [k for k in keys if k in EXPECTED_ROWS] == list(EXPECTED_ROWS)
    assert "- CPU:" in out.stdout and "- Redis " in out.stdout


@pytest.mark.timeout(360)
def test_the_scaling_row_takes_the_worker_counts(redis_url: str):
    out = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "scaling", "--runs", "1", "--workers",
                          "1,3"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"stdout:\n{out.stdout}\nstderr:\n{out.stderr[-4000:]}"
    rows = [line for line in out.stdout.splitlines() if line.startswith("| 8")]
    assert [row.split("|")[1].strip() for row in rows] == ["8a", "8-3"]
    assert all("coordinator" in row and "Redis" in row and "workers" in row for row in rows)
    assert all("roots on the pool" in row and "caps the pool at (worker processes): coordinator " in row
               for row in rows)


@pytest.mark.timeout(360)
def test_the_scaling_row_can_drive_its_roots_from_one_coordinator(redis_url: str):
    out = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "scaling", "--runs", "1", "--workers",
                          "1", "--roots", "coordinator"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"stdout:\n{out.stdout}\nstderr:\n{out.stderr[-4000:]}"
    rows = [line for line in out.stdout.splitlines() if line.startswith("| 8a")]
    assert len(rows) == 1 and "roots on the pool" not in rows[0], out.stdout


@pytest.mark.timeout(360)
def test_the_idle_pool_scenario_reports_the_redis_load_of_n_live_trees(redis_url: str):
    out = subprocess.run([sys.executable, "-m", "bench", "--quick", "--scale", "50", "--workers", "2"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"stdout:\n{out.stdout}\nstderr:\n{out.stderr[-4000:]}"
    [row] = [line for line in out.stdout.splitlines() if line.startswith("| 9 ")]
    assert "50 live idle trees, 2 worker processes" in row and "cmd/s" in row


@pytest.mark.timeout(360)
def test_a_short_soak_reports_runs_per_second_and_the_workers_rss(redis_url: str):
    out = subprocess.run([sys.executable, "-m", "bench.soak", "--runs", "20", "--in-flight", "8"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"stdout:\n{out.stdout}\nstderr:\n{out.stderr[-4000:]}"
    assert "runs/s" in out.stdout and "worker RSS: start" in out.stdout


@pytest.mark.timeout(120)
def test_the_prompt_cache_bench_reports_a_larger_cached_share_than_shellys_order():
    out = subprocess.run([sys.executable, "-m", "bench.cache", "--children", "4", "--runs", "1"], cwd=ROOT,
                         capture_output=True, text=True, timeout=100)
    assert out.returncode == 0, f"stdout:\n{out.stdout}\nstderr:\n{out.stderr[-4000:]}"
    shares = [float(line.split("cached share ")[1].split("%")[0]) for line in out.stdout.splitlines()]
    assert len(shares) == 2 and shares[0] > shares[1]


@pytest.mark.timeout(360)
def test_the_commands_row_refuses_a_broker_apart_instead_of_missing_its_commands(redis_url: str, tmp_path: Path):
    with own_redis(tmp_path) as port:
        out = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "commands", "--runs", "1"], cwd=ROOT,
                             capture_output=True, text=True, timeout=300,
                             env={**os.environ, "BENCH_BROKER_URL": f"redis://127.0.0.1:{port}/0"})
    assert out.returncode != 0, out.stdout
    assert "commands: cannot run with the broker on a Redis of its own" in out.stderr, out.stderr[-4000:]
