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


TEAMS = [{"name": "pair", "description": "two of solo", "members": ["solo", "solo"],
          "coordinator": {"kind": "sequential"}}]


def test_agents_json_lists_a_team_with_its_members_and_coordinator(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir, teams=TEAMS)
    rows = json.loads(invoke("agents", "--json").stdout)
    assert rows[1] == {"name": "pair", "provider": "", "toolboxes": [], "description": "two of solo",
                       "entry": False, "team": ["solo", "solo"], "coordinator": "sequential"}


def test_run_takes_a_team_as_its_agent(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir, {"solo": ["solo says {task}"]}, teams=TEAMS)
    result = invoke("run", "--agent", "pair", "--json", "hi")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["reply"].startswith("solo says You are \"solo\", a member of the team \"pair\"")


def test_a_team_with_an_unknown_member_is_a_config_error(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir, teams=[{"name": "t", "members": ["ghost"]}])
    result = invoke("agents")
    assert result.exit_code == 2 and 'teams[0].members[0]: unknown agent or team "ghost"' in result.stderr


async def test_mcp_serve_agents_offers_a_tool_per_team(workdir: Path) -> None:
    from shelly_dist.cli.mcp import agents_toolbox
    from shelly_dist.engine import Engine

    write_config(workdir, teams=TEAMS)
    async with await Engine.open(None, shelly_dir=workdir / ".shelly") as engine:
        assert [t.name for t in agents_toolbox(engine, "s")] == ["agent_solo", "agent_pair"]


def test_an_mcp_server_named_team_is_a_load_error_naming_the_clash(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    """The built-in team toolbox would silently win over it: refuse it instead, in one line."""
    write_config(workdir, mcp_servers=[{"name": "team", "command": "mcp-team"}])
    result = invoke("agents")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        'shelly: config: mcp_servers[0].name: "team" is the name of the built-in team toolbox '
        "(docs/workflows.md): rename the MCP server (.shelly/config.yaml)"]
