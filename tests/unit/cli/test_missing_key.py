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


def _claude_without_a_key_line(workdir: Path, **provider: str) -> None:
    (workdir / ".shelly").mkdir()
    (workdir / ".shelly" / "config.yaml").write_text(yaml.safe_dump({
        "providers": [{"name": "claude", "kind": "anthropic", "model": "claude-x", **provider}],
        "agents": [{"name": "solo"}],
    }))


def test_doctor_names_a_vendor_provider_with_no_key_and_no_vendor_variable(
    invoke, workdir: Path, monkeypatch: pytest.MonkeyPatch  # type: ignore[no-untyped-def]
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    _claude_without_a_key_line(workdir)
    result = invoke("doctor")
    assert 'provider "claude": no api_key, and ANTHROPIC_API_KEY is not set' in result.output


def test_run_with_a_vendor_provider_with_no_key_fails_at_once_naming_the_variable(
    invoke, workdir: Path, monkeypatch: pytest.MonkeyPatch  # type: ignore[no-untyped-def]
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    _claude_without_a_key_line(workdir)
    result = invoke("run", "hello", "--quiet")
    assert result.exit_code == 1
    assert 'shelly: provider "claude": no api_key, and ANTHROPIC_API_KEY is not set' in result.stderr


def test_an_exported_vendor_variable_is_the_key_of_a_provider_with_none() -> None:
    from shelly_dist.engine.config import parse_config

    text = yaml.safe_dump({"providers": [{"name": "claude", "kind": "anthropic", "model": "claude-x"}],
                           "agents": [{"name": "solo"}]})
    cfg = parse_config(text, {"ANTHROPIC_API_KEY": "sk-ant-exported"})
    assert cfg.providers[0].api_key == "sk-ant-exported"
    assert not cfg.warnings


def test_a_server_of_ones_own_is_never_sent_the_vendors_key() -> None:
    from shelly_dist.engine.config import parse_config

    text = yaml.safe_dump({"providers": [{"name": "local", "kind": "openai", "model": "qwen",
                                          "base_url": "http://127.0.0.1:8080/v1"}],
                           "agents": [{"name": "solo"}]})
    cfg = parse_config(text, {"OPENAI_API_KEY": "sk-openai-secret"})
    assert cfg.providers[0].api_key == ""
    assert not cfg.warnings


def test_a_grok_provider_with_no_key_takes_shellys_grok_variable() -> None:
    from shelly_dist.engine.config import parse_config

    text = yaml.safe_dump({"providers": [{"name": "g", "kind": "grok", "model": "grok-4"}],
                           "agents": [{"name": "solo"}]})
    assert parse_config(text, {"GROK_API_KEY": "xai-from-shelly"}).providers[0].api_key == "xai-from-shelly"


def test_a_url_that_only_names_the_vendors_host_in_its_path_is_not_sent_the_key() -> None:
    from shelly_dist.engine.config import parse_config

    text = yaml.safe_dump({"providers": [{"name": "p", "kind": "openai", "model": "m",
                                          "base_url": "http://proxy.example/api.openai.com/v1"}],
                           "agents": [{"name": "solo"}]})
    assert parse_config(text, {"OPENAI_API_KEY": "sk-secret"}).providers[0].api_key == ""
    official = text.replace("http://proxy.example/api.openai.com/v1", "https://api.openai.com/v1")
    assert parse_config(official, {"OPENAI_API_KEY": "sk-secret"}).providers[0].api_key == "sk-secret"
