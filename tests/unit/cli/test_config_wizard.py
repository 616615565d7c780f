"""``shelly config``: the wizard writes a config the loader accepts, with keys only as ``${VAR}``."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from shelly_dist.cli.main import cli
from shelly_dist.engine import load_config


def answers(*lines: str) -> str:
    return "\n".join(lines) + "\n"


ONE_PROVIDER = ("anthropic", "", "", "", "sk-ant-api03-SECRET", "ANTHROPIC_API_KEY", "y", "n")
ONE_AGENT = ("assistant", "", "", "", "", "n")


def run(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, ["config", "--shelly-dir", str(tmp_path / ".shelly")], input=text)


def test_a_new_config_is_valid_and_holds_the_key_only_as_a_reference(tmp_path: Path) -> None:
    result = run(tmp_path, answers(*ONE_PROVIDER, *ONE_AGENT, "n"))
    assert result.exit_code == 0, result.output
    path = tmp_path / ".shelly" / "config.yaml"
    assert "SECRET" not in path.read_text()  # the pasted key was refused, never written
    assert "never the key itself" in result.output
    cfg = load_config(path, {"ANTHROPIC_API_KEY": "sk-from-the-environment"})
    assert cfg.providers[0].api_key == "sk-from-the-environment"
    assert yaml.safe_load(path.read_text())["providers"][0]["api_key"] == "${ANTHROPIC_API_KEY}"
    assert [a.name for a in cfg.agents] == ["assistant"]


def test_a_url_with_a_password_is_refused_and_a_reference_taken(tmp_path: Path) -> None:
    pool = ("y", "redis://:hunter2@cache:6379/0", "${REDIS_URL}", "", "")
    result = run(tmp_path, answers(*ONE_PROVIDER, *ONE_AGENT, *pool))
    assert result.exit_code == 0, result.output
    text = (tmp_path / ".shelly" / "config.yaml").read_text()
    assert "hunter2" not in text and "holds a password" in result.output
    assert yaml.safe_load(text)["distributed"] == {"redis_url": "${REDIS_URL}", "broker_url": "${REDIS_URL}",
                                                   "queue": "shelly"}


def test_an_existing_config_keeps_what_it_is_not_asked_about(tmp_path: Path) -> None:
    shelly_dir = tmp_path / ".shelly"
    shelly_dir.mkdir()
    (shelly_dir / "config.yaml").write_text(yaml.safe_dump({
        "providers": [{"name": "p", "kind": "openai", "model": "m", "api_key": "${OPENAI_API_KEY}"}],
        "agents": [{"name": "a", "provider": "p", "options": {"max_iterations": 7}}],
        "context": {"max_external_file_size": 1000}}))
    result = run(tmp_path, answers("n", "y", "b", "", "", "p", "", "n", "b", "n"))
    assert result.exit_code == 0, result.output
    data = yaml.safe_load((shelly_dir / "config.yaml").read_text())
    assert data["context"] == {"max_external_file_size": 1000}
    assert data["agents"][0]["options"] == {"max_iterations": 7}
    assert [a["name"] for a in data["agents"]] == ["a", "b"] and data["entry_agent"] == "b"


def test_stopping_the_wizard_writes_nothing(tmp_path: Path) -> None:
    result = run(tmp_path, answers("anthropic"))  # input ends: as Ctrl-D
    assert result.exit_code == 130 and not (tmp_path / ".shelly" / "config.yaml").exists()
