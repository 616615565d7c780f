"""``list_agents`` and the orchestration toolbox an agent gets while it may still delegate."""

from __future__ import annotations

import json

from shelly_dist.agent.agent import Roster
from shelly_dist.agent.delegation import delegate_tool
from shelly_dist.tools import Tool, ToolBox


def list_agents_tool(registry: Roster, config_name: str) -> Tool:
    """Lists every registered agent except the caller (by config name, case-insensitively)."""

    async def handler(arguments: str) -> str:
        others = [e.to_json() for e in registry.list() if e.name.lower() != config_name.lower()]
        return json.dumps(others or None)

    return Tool(
        "list_agents",
        "List the agents you can delegate to, with their descriptions.",
        {"type": "object", "properties": {}},
        handler,
        group="agents",
        retry_on_crash=True,
    )


def orchestration_toolbox(registry: Roster, config_name: str) -> ToolBox:
    return ToolBox([list_agents_tool(registry, config_name), delegate_tool()], name="orchestration")
