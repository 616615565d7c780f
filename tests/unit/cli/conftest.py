"""CLI tests run each command in a fresh working directory through click's ``CliRunner``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from shelly_dist.cli.main import cli


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for var in ("SHELLY_CONFIG", "SHELLY_BROKER_URL", "SHELLY_REDIS_URL"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


@pytest.fixture
def invoke(workdir: Path) -> Callable[..., Result]:
    runner = CliRunner()

    def run(*args: str, input: str | None = None) -> Result:
        return runner.invoke(cli, list(args), input=input, catch_exceptions=False)

    return run


def write_config(workdir: Path, script: dict[str, list[Any]] | None = None, **extra: Any) -> Path:
    """A one-agent scripted config at ``.shelly/config.yaml``."""
    data = {
        "providers": [{"name": "p", "kind": "scripted", "model": "m", "script": script or {"*": ["scripted answer"]}}],
        "agents": [{"name": "solo", "description": "does it all"}],
        **extra,
    }
    path = workdir / ".shelly" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path
