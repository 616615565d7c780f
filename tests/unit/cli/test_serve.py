"""``shelly serve`` refuses to listen where other machines reach it unless a token is set."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.cli.conftest import write_config


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.7", "console.example"])
def test_serve_off_loopback_without_a_token_refuses_to_start_and_says_so(
        invoke, workdir: Path, monkeypatch: pytest.MonkeyPatch, host: str) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("SHELLY_SERVE_TOKEN", raising=False)
    write_config(workdir)
    result = invoke("serve", "--host", host)
    assert result.exit_code == 2
    assert f"--host {host} is reachable from other machines: set SHELLY_SERVE_TOKEN" in result.stderr


def test_serve_help_names_the_defaults(invoke) -> None:  # type: ignore[no-untyped-def]
    result = invoke("serve", "--help")
    assert result.exit_code == 0
    assert "127.0.0.1" in result.stdout and "8700" in result.stdout and "SHELLY_SERVE_TOKEN" in result.stdout
