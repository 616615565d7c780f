"""A provider whose key variable is not set, named where the user looks: `shelly doctor`, and the
one line `shelly run` ends with (not a 401 after three retries)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml


def _keyless_claude(workdir: Path) -> None:
    (workdir / ".shelly").mkdir()
    (workdir / ".shelly" / "config.yaml").write_text(yaml.safe_dump({
        "providers": [{"name": "claude", "kind": "anthropic", "model": "claude-x", "api_key": "${ANTHROPIC_API_KEY}"}],
        "agents": [{"name": "solo"}],
    }))


def test_doctor_names_a_provider_whose_key_variable_is_not_set(
    invoke, workdir: Path, monkeypatch: pytest.MonkeyPatch  # type: ignore[no-untyped-def]
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    _keyless_claude(workdir)
    result = invoke("doctor")
    assert 'provider: providers[0].api_key: provider "claude": ANTHROPIC_API_KEY is not set' in result.output
    assert "export the variable" in result.output


def test_run_with_a_provider_whose_key_variable_is_not_set_names_it_in_one_line(
    invoke, workdir: Path, monkeypatch: pytest.MonkeyPatch  # type: ignore[no-untyped-def]
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    _keyless_claude(workdir)
    result = invoke("run", "hello", "--quiet")
    assert result.exit_code == 1
    assert 'shelly: provider "claude": ANTHROPIC_API_KEY is not set' in result.stderr
