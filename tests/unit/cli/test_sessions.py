"""``shelly sessions`` embedded: the sessions ``shelly run`` saved in the state directory."""

from __future__ import annotations

from pathlib import Path

from tests.unit.cli.conftest import write_config


def test_sessions_lists_what_run_saved_most_recent_first(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir, {"*": ["first", "second"]})
    assert invoke("run", "one", "--quiet").exit_code == 0
    assert invoke("run", "two", "--quiet").exit_code == 0
    result = invoke("sessions")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and "solo" in lines[0]
    assert lines[0].endswith("two") and lines[1].endswith("one")


def test_sessions_with_none_saved_says_so(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir)
    result = invoke("sessions")
    assert result.exit_code == 0 and "no saved sessions" in result.stderr
