"""The heartbeat file and its probe, run for real outside a container (including as `python -m`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shelly_dist.runtime.heartbeat import Heartbeat, check, main, write_beat


def _probe(path: Path, max_age: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shelly_dist.runtime.heartbeat", "--file", str(path), "--max-age", str(max_age)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_live_heartbeat_passes_the_module_probe(tmp_path: Path) -> None:
    path = tmp_path / "hb"
    with Heartbeat(path, interval=5):
        result = _probe(path, 60)
    assert result.returncode == 0, result.stderr


def test_stale_file_fails_the_module_probe_with_reason(tmp_path: Path) -> None:
    path = tmp_path / "hb"
    write_beat(path, now=time.time() - 3600)
    result = _probe(path, 60)
    assert result.returncode == 1
    assert "stale" in result.stderr


def test_missing_file_fails_the_module_probe_with_reason(tmp_path: Path) -> None:
    result = _probe(tmp_path / "absent", 60)
    assert result.returncode == 1
    assert "no heartbeat file" in result.stderr


def test_probe_reads_file_from_env_when_no_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "hb"
    write_beat(path)
    monkeypatch.setenv("SHELLY_HEARTBEAT_FILE", str(path))
    assert main(["--max-age", "60"]) == 0


def test_beat_records_pid_and_hostname(tmp_path: Path) -> None:
    path = tmp_path / "hb"
    write_beat(path, now=123.0)
    record = json.loads(path.read_text())
    assert record["ts"] == 123.0
    assert record["pid"] == os.getpid()
    assert record["hostname"]


def test_malformed_file_fails_check(tmp_path: Path) -> None:
    path = tmp_path / "hb"
    path.write_text("{not json")
    ok, reason = check(path, 60)
    assert not ok
    assert "unreadable" in reason


def test_heartbeat_refreshes_the_file_while_running(tmp_path: Path) -> None:
    path = tmp_path / "hb"
    with Heartbeat(path, interval=0.05):
        first = json.loads(path.read_text())["ts"]
        deadline = time.monotonic() + 10
        while json.loads(path.read_text())["ts"] == first:
            assert time.monotonic() < deadline, "heartbeat file was never refreshed"
            time.sleep(0.01)


def test_stopped_heartbeat_removes_its_file(tmp_path: Path) -> None:
    path = tmp_path / "hb"
    beat = Heartbeat(path, interval=5)
    beat.start()
    beat.stop()
    assert not path.exists()
    assert not beat.running


def test_unhealthy_probe_leaves_the_file_to_go_stale(tmp_path: Path) -> None:
    path = tmp_path / "hb"
    write_beat(path, now=1.0)
    beat = Heartbeat(path, interval=5, probe=lambda: False)
    assert beat.beat() is False
    assert json.loads(path.read_text())["ts"] == 1.0


def test_raising_probe_does_not_kill_the_beat(tmp_path: Path) -> None:
    def boom() -> bool:
        raise RuntimeError("loop stuck")

    assert Heartbeat(tmp_path / "hb", interval=5, probe=boom).beat() is False


def test_interval_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="heartbeat: interval"):
        Heartbeat(tmp_path / "hb", interval=0)
