"""``shelly runs`` and ``shelly cancel`` read and write the run journals in Redis: a config with
only ``distributed.redis_url`` (no broker) is enough, and an unknown session is an error."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from shelly_dist.cli.main import cli
from shelly_dist.redisio.connection import connect
from shelly_dist.runtime.celery import RuntimeSettings
from shelly_dist.runtime.celery.journal import Journal

pytestmark = pytest.mark.integration

SESSION = "0123456789abcdef"
MINIMAL = {"providers": [{"name": "p", "kind": "scripted"}], "agents": [{"name": "lead", "provider": "p"}]}


@pytest.fixture
def project(tmp_path: Path, redis_url: str, key_prefix: str) -> Path:
    (tmp_path / ".shelly").mkdir()
    config = {**MINIMAL, "distributed": {"redis_url": redis_url, "key_prefix": key_prefix}}
    (tmp_path / ".shelly" / "config.yaml").write_text(yaml.safe_dump(config))
    return tmp_path


def a_root(redis_url: str, key_prefix: str) -> None:
    async def create() -> None:
        client = connect(redis_url)
        try:
            journal = Journal(client, RuntimeSettings(broker_url="", redis_url=redis_url, key_prefix=key_prefix))
            await journal.create_root("r-only", agent="lead", session=SESSION, mode="worker", task="go",
                                      fingerprint="fp")
        finally:
            await client.aclose()

    asyncio.run(create())


def shelly(project: Path, *args: str, monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.chdir(project)
    for name in ("SHELLY_BROKER_URL", "SHELLY_REDIS_URL", "SHELLY_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    return CliRunner().invoke(cli, list(args))


def test_runs_lists_a_sessions_runs_with_only_redis_configured(
    project: Path, redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    a_root(redis_url, key_prefix)
    out = shelly(project, "runs", "--session", SESSION, monkeypatch=monkeypatch)
    assert out.exit_code == 0, out.output  # type: ignore[attr-defined]
    assert "r-only  lead  queued" in out.output  # type: ignore[attr-defined]


def test_cancel_cancels_a_tree_with_only_redis_configured(
    project: Path, redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    a_root(redis_url, key_prefix)
    out = shelly(project, "cancel", "r-only", monkeypatch=monkeypatch)
    assert out.exit_code == 0, out.output  # type: ignore[attr-defined]
    assert "canceled run tree r-only" in out.output  # type: ignore[attr-defined]


def test_runs_of_an_unknown_session_is_an_error_naming_it(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = shelly(project, "runs", "--session", "fedcba9876543210", monkeypatch=monkeypatch)
    assert out.exit_code == 2  # type: ignore[attr-defined]
    assert "runs: no runs in session fedcba9876543210" in out.output  # type: ignore[attr-defined]


def test_runs_without_redis_names_what_to_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".shelly").mkdir()
    (tmp_path / ".shelly" / "config.yaml").write_text(yaml.safe_dump(MINIMAL))
    out = shelly(tmp_path, "runs", "--session", SESSION, monkeypatch=monkeypatch)
    assert out.exit_code == 2  # type: ignore[attr-defined]
    assert "runs: the run journals live in Redis: set distributed.redis_url" in out.output  # type: ignore[attr-defined]
