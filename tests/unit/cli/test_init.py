"""``shelly init``."""

from __future__ import annotations

from pathlib import Path


def test_init_list_shows_every_template(invoke) -> None:  # type: ignore[no-untyped-def]
    result = invoke("init", "--list")
    assert result.exit_code == 0
    assert {"demo", "dev-team", "simple-assistant"} <= {line.split()[0] for line in result.output.splitlines()}


def test_init_creates_the_shelly_dir_from_a_template(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    result = invoke("init", "--template", "demo")
    assert result.exit_code == 0
    assert "kind: scripted" in (workdir / ".shelly" / "config.yaml").read_text()


def test_init_keeps_existing_files_without_force(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    invoke("init", "--template", "demo")
    (workdir / ".shelly" / "config.yaml").write_text("mine")
    assert invoke("init", "--template", "demo").exit_code == 0
    assert (workdir / ".shelly" / "config.yaml").read_text() == "mine"
    assert invoke("init", "--template", "demo", "--force").exit_code == 0
    assert (workdir / ".shelly" / "config.yaml").read_text() != "mine"


def test_init_unknown_template_exits_2(invoke) -> None:  # type: ignore[no-untyped-def]
    result = invoke("init", "--template", "nope")
    assert result.exit_code == 2
    assert 'unknown template "nope"' in result.output
