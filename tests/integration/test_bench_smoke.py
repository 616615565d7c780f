"""The benchmark suite runs end to end at a tiny size, so it cannot rot (no timing assertion).

The quick bench starts some thirty processes: about 30 s on an idle 2-core machine, two minutes
under load, hence the generous deadlines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.report import EXPECTED_ROWS

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
