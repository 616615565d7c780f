"""The systemd units parse (systemd-analyze verify where present, else a key check) and keep their promises."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.ops.support import ROOT

SYSTEMD = ROOT / "deploy" / "systemd"
UNITS = ["shelly-worker@.service", "shelly-flower.service"]


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((SYSTEMD / name).read_text())
    return parser


def _verify(text: str, name: str, tmp_path: Path) -> list[str]:
    """systemd-analyze's complaints about our unit (ExecStart pointed at a binary that exists)."""
    instance = name.replace("@.", "@1.")
    (tmp_path / instance).write_text(re.sub(r"/opt/shelly/venv/bin/shelly", sys.executable, text))
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(tmp_path / instance)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    complaints = [line for line in result.stderr.splitlines() if instance in line]
    return complaints + ([f"exit {result.returncode}"] if result.returncode else [])


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
@pytest.mark.parametrize("name", UNITS)
def test_unit_passes_systemd_analyze_verify(name: str, tmp_path: Path) -> None:
    assert _verify((SYSTEMD / name).read_text(), name, tmp_path) == []


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verify_catches_a_misspelt_key(tmp_path: Path) -> None:
    text = (SYSTEMD / UNITS[0]).read_text().replace("KillSignal=", "KillSignl=")
    assert _verify(text, UNITS[0], tmp_path) != []


@pytest.mark.parametrize("name", UNITS)
def test_unit_has_the_sections_and_keys_it_needs(name: str) -> None:
    unit = _unit(name)
    assert unit.sections() == ["Unit", "Service", "Install"]
    service = unit["Service"]
    assert service["User"] == "shelly"
    assert service["EnvironmentFile"] == "/etc/shelly/shelly.env"
    assert service["ExecStart"].startswith("/opt/shelly/venv/bin/shelly ")
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_worker_unit_shuts_down_warm() -> None:
    service = _unit(UNITS[0])["Service"]
    assert service["KillSignal"] == "SIGTERM"
    assert service["KillMode"] == "mixed"
    assert "--heartbeat-file /run/shelly-worker-%i/heartbeat" in service["ExecStart"]
    assert service["RuntimeDirectory"] == "shelly-worker-%i"


def test_env_example_defines_every_variable_the_units_use() -> None:
    used = {v for name in UNITS for v in re.findall(r"\$\{(\w+)\}", (SYSTEMD / name).read_text())}
    example = (SYSTEMD / "shelly.env.example").read_text()
    defined = {line.split("=", 1)[0] for line in example.splitlines() if re.match(r"^\w+=", line)}
    assert used <= defined
    assert "FLOWER_BASIC_AUTH" in defined


def _example_env() -> dict[str, str]:
    lines = (SYSTEMD / "shelly.env.example").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if re.match(r"^\w+=", line))


@pytest.mark.parametrize(("command", "refusal"), [
    (["worker", "--concurrency", "1"], "distributed.broker_url: a broker is required"),
    (["flower"], "flower: authentication is required"),
], ids=["worker", "flower"])
def test_units_refuse_to_start_on_the_shipped_env_file(command: list[str], refusal: str, tmp_path: Path) -> None:
    """shelly.env.example ships no password: a unit started on it unchanged exits 2, naming what is missing."""
    env = {**_example_env(), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "SHELLY_CONFIG": str(ROOT / "k8s" / "base" / "shelly" / "config.yaml")}
    out = subprocess.run([sys.executable, "-m", "shelly_dist.cli.main", *command], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert refusal in out.stderr
