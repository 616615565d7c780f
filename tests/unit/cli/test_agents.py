"""``shelly agents``."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.cli.conftest import write_config


def test_agents_json_lists_name_provider_toolboxes_description(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir)
    result = invoke("agents", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == [
        {"name": "solo", "provider": "p", "toolboxes": [], "description": "does it all", "entry": True}
    ]


def test_agents_table_shows_each_agent(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir)
    result = invoke("agents")
    assert result.exit_code == 0 and "solo" in result.stdout and "does it all" in result.stdout


def test_agents_without_config_exits_2(invoke) -> None:  # type: ignore[no-untyped-def]
    result = invoke("agents")
    assert result.exit_code == 2 and "no config file" in result.stderr
