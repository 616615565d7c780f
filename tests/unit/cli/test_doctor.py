"""``shelly doctor`` on an embedded config: what it names without any service to probe."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml


def test_doctor_names_a_provider_whose_key_variable_is_not_set(
    invoke, workdir: Path, monkeypatch: pytest.MonkeyPatch  # type: ignore[no-untyped-def]
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    (workdir / ".shelly").mkdir()
    (workdir / ".shelly" / "config.yaml").write_text(yaml.safe_dump({
        "providers": [{"name": "claude", "kind": "anthropic", "model": "claude-x", "api_key": "${ANTHROPIC_API_KEY}"}],
        "agents": [{"name": "solo"}],
    }))
    result = invoke("doctor")
    assert 'provider: providers[0].api_key: provider "claude": ANTHROPIC_API_KEY is not set' in result.output
    assert "export the variable" in result.output
