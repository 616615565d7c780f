"""ToolPolicy: allow, deny, groups, globs, depth rules and the leaf rule."""

from __future__ import annotations

from shelly_dist.tools import Tool
from shelly_dist.tools.policy import ToolPolicy


async def _noop(arguments: str) -> str:
    return ""


def tool(name: str, group: str = "") -> Tool:
    return Tool(name=name, description="", input_schema={"type": "object"}, handler=_noop, group=group)


TOOLS = [
    tool("fs_read", "fs"),
    tool("fs_write", "fs"),
    tool("exec_run", "exec"),
    tool("http_fetch", "web"),
    tool("git_commit", "git"),
    tool("query", "mcp:db"),
    tool("delegate", "agents"),
    tool("list_agents", "agents"),
    tool("task_complete", "agents"),
]


def names(tools: list[Tool]) -> list[str]:
    return [t.name for t in tools]


def test_no_rules_keep_every_tool() -> None:
    assert names(ToolPolicy().apply(TOOLS, 0)) == names(TOOLS)


def test_allow_by_name_keeps_only_those() -> None:
    assert names(ToolPolicy(allow=["exec_run", "fs_read"]).apply(TOOLS, 0)) == ["fs_read", "exec_run"]


def test_empty_allow_list_keeps_nothing() -> None:
    assert ToolPolicy(allow=[]).apply(TOOLS, 0) == []


def test_allow_by_group() -> None:
    assert names(ToolPolicy(allow=["group:fs", "group:web"]).apply(TOOLS, 0)) == ["fs_read", "fs_write", "http_fetch"]


def test_deny_wins_over_allow() -> None:
    assert names(ToolPolicy(allow=["group:fs"], deny=["fs_write"]).apply(TOOLS, 0)) == ["fs_read"]


def test_deny_by_group_and_glob() -> None:
    kept = names(ToolPolicy(deny=["group:agents", "fs_*"]).apply(TOOLS, 0))
    assert kept == ["exec_run", "http_fetch", "git_commit", "query"]


def test_mcp_group_matches_by_server_and_for_all_servers() -> None:
    assert names(ToolPolicy(allow=["group:mcp:db"]).apply(TOOLS, 0)) == ["query"]
    assert names(ToolPolicy(allow=["group:mcp"]).apply(TOOLS, 0)) == ["query"]
    assert names(ToolPolicy(allow=["group:mcp:*"]).apply(TOOLS, 0)) == ["query"]


def test_deny_at_depth_applies_from_that_depth_on() -> None:
    policy = ToolPolicy(deny_at_depth={1: ["group:exec"], 2: ["group:web"]})
    assert "exec_run" in names(policy.apply(TOOLS, 0))
    assert "exec_run" not in names(policy.apply(TOOLS, 1)) and "http_fetch" in names(policy.apply(TOOLS, 1))
    assert not {"exec_run", "http_fetch"} & set(names(policy.apply(TOOLS, 3)))


def test_leaf_agent_loses_delegation_but_keeps_task_complete() -> None:
    kept = names(ToolPolicy().apply(TOOLS, 2, leaf=True))
    assert "delegate" not in kept and "list_agents" not in kept and "task_complete" in kept


def test_depth_keys_may_be_strings_as_yaml_writes_them() -> None:
    policy = ToolPolicy(None, ["git_commit"], {"1": ["fs_*"]})
    assert names(policy.apply(TOOLS, 1)) == [
        "exec_run",
        "http_fetch",
        "query",
        "delegate",
        "list_agents",
        "task_complete",
    ]
