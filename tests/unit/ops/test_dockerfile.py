"""The worker image's Dockerfile says what docs/operations.md and workers/README.md promise."""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.unit.ops.support import ROOT

DOCKERFILE = ROOT / "workers" / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def only(name: str) -> str:
    found = [args for word, args in instructions() if word == name]
    assert len(found) == 1, f"expected one {name}, found {found}"
    return found[0]


def test_base_image_is_python_311_slim() -> None:
    assert only("FROM") == "python:3.11-slim"


def test_entrypoint_is_shelly_worker() -> None:
    assert json.loads(only("ENTRYPOINT")) == ["shelly", "worker"]


def test_image_runs_as_a_non_root_user() -> None:
    user = only("USER").split(":")[0]
    assert user not in ("root", "0")


def test_stop_signal_is_sigterm() -> None:
    assert only("STOPSIGNAL") == "SIGTERM"


def test_healthcheck_execs_the_heartbeat_probe(tmp_path: Path) -> None:
    """The HEALTHCHECK command, run here against a live heartbeat, passes; against none, fails."""
    from shelly_dist.runtime.heartbeat import Heartbeat

    command = json.loads(only("HEALTHCHECK").split("CMD", 1)[1])
    assert command[:3] == ["python", "-m", "shelly_dist.runtime.heartbeat"]
    command[0] = sys.executable
    command[command.index("--file") + 1] = str(tmp_path / "hb")
    assert subprocess.run(command, capture_output=True, timeout=60).returncode == 1
    with Heartbeat(tmp_path / "hb", interval=5):
        assert subprocess.run(command, capture_output=True, timeout=60).returncode == 0


def test_build_context_sends_everything_pip_install_needs() -> None:
    """Every COPY source exists and survives .dockerignore (pyproject's readme included)."""
    patterns = [p for p in (ROOT / ".dockerignore").read_text().splitlines() if p and not p.startswith("#")]

    def ignored(path: str) -> bool:
        verdict = False
        for pattern in patterns:
            negate = pattern.startswith("!")
            if fnmatch.fnmatch(path, pattern.lstrip("!").rstrip("/")):
                verdict = not negate
        return verdict

    sources = [s for word, args in instructions() if word == "COPY" for s in args.split()[:-1]]
    readme = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["readme"]
    assert readme in sources
    for source in sources:
        assert (ROOT / source).exists(), f"COPY source missing from the build context: {source}"
        assert not ignored(source), f".dockerignore excludes COPY source {source}"
