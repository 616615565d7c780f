"""compose.yaml against the Compose specification's schema, and the properties the docs promise."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml

from tests.unit.ops.support import ROOT

COMPOSE = ROOT / "compose.yaml"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _check_jsonschema(path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", path],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_compose_file_matches_the_compose_spec_schema() -> None:
    result = _check_jsonschema(str(COMPOSE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_schema_check_rejects_an_unknown_service_key(tmp_path) -> None:
    broken = tmp_path / "compose.yaml"
    broken.write_text(COMPOSE.read_text().replace("    stop_signal: SIGTERM", "    stop_signl: SIGTERM"))
    assert _check_jsonschema(str(broken)).returncode != 0


def test_worker_is_scalable(compose: dict) -> None:
    worker = compose["services"]["worker"]
    assert "container_name" not in worker
    assert not any(":" in str(p) for p in worker.get("ports", []))


def test_worker_healthcheck_uses_the_heartbeat_module(compose: dict) -> None:
    # A string (CMD-SHELL): podman-compose 1.0.3 consumes a ["CMD", ...] list on the first replica.
    test = compose["services"]["worker"]["healthcheck"]["test"]
    assert test.startswith("python -m shelly_dist.runtime.heartbeat --file /tmp/shelly-worker.heartbeat ")


def test_redis_requires_a_password_persists_and_never_evicts(compose: dict) -> None:
    command = " ".join(compose["services"]["redis"]["command"])
    assert '--requirepass "$$REDIS_PASSWORD"' in command
    assert "--appendonly yes" in command and "--appendfsync everysec" in command
    assert "--maxmemory-policy noeviction" in command
    assert compose["services"]["redis"]["environment"]["REDIS_PASSWORD"].startswith("${REDIS_PASSWORD:?")


def test_flower_refuses_to_start_without_basic_auth(compose: dict) -> None:
    flower = compose["services"]["flower"]
    assert flower["environment"]["FLOWER_BASIC_AUTH"].startswith("${FLOWER_BASIC_AUTH:?")
    assert flower["entrypoint"] == ["shelly", "flower", "--address", "0.0.0.0", "--port", "5555"]
    assert flower["ports"] == ["${FLOWER_BIND:-127.0.0.1}:${FLOWER_PORT:-5555}:5555"]


def test_coordinator_runs_only_under_its_profile(compose: dict) -> None:
    coordinator = compose["services"]["coordinator"]
    assert coordinator["profiles"] == ["coordinator"]
    assert coordinator["entrypoint"] == ["shelly"]


def test_env_example_lists_every_variable_compose_uses() -> None:
    used = set(re.findall(r"\$\{(\w+)", COMPOSE.read_text()))
    example = ROOT / ".env.example"
    defined = {line.split("=", 1)[0] for line in example.read_text().splitlines() if re.match(r"^\w+=", line)}
    assert used - defined == set()


def test_env_example_ships_no_password() -> None:
    """Copied unchanged, .env.example leaves the secrets empty, which compose's ${VAR:?} refuses."""
    lines = (ROOT / ".env.example").read_text().splitlines()
    example = dict(line.split("=", 1) for line in lines if re.match(r"^\w+=", line))
    assert example["REDIS_PASSWORD"] == "" and example["FLOWER_BASIC_AUTH"] == ""
    text = COMPOSE.read_text()
    assert "${REDIS_PASSWORD:-" not in text and "${FLOWER_BASIC_AUTH:-" not in text


def test_worker_exposes_its_metrics_port_in_the_compose_network(compose: dict) -> None:
    worker = compose["services"]["worker"]
    assert worker["environment"]["SHELLY_METRICS_PORT"] == "9100"
    assert worker["environment"]["SHELLY_METRICS_HOST"] == "0.0.0.0"
    assert worker["expose"] == ["9100"]


def test_the_console_refuses_to_start_without_its_token_and_binds_loopback(compose: dict) -> None:
    console = compose["services"]["console"]
    assert console["entrypoint"] == ["shelly", "serve", "--host", "0.0.0.0", "--port", "8700"]
    assert console["environment"]["SHELLY_SERVE_TOKEN"].startswith("${SHELLY_SERVE_TOKEN:?")
    assert console["ports"] == ["${CONSOLE_BIND:-127.0.0.1}:${CONSOLE_PORT:-8700}:8700"]
    assert "/api/health" in console["healthcheck"]["test"]
    lines = (ROOT / ".env.example").read_text().splitlines()
    assert "SHELLY_SERVE_TOKEN=" in lines
