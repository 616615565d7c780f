"""``tool_scope``: hide tools from the model by name (Shelly's ``ToolFilter``): they are left out of
what each model call is offered; the agent's toolboxes themselves are unchanged."""

from __future__ import annotations

from dataclasses import dataclass, field

from shelly_dist.agent.effects.base import IterationContext
from shelly_dist.tools import Tool


@dataclass
class ToolScope:
    exclude: list[str] = field(default_factory=list)
    kind: str = "tool_scope"

    async def evaluate(self, ic: IterationContext) -> None:
        return None

    def filter_tools(self, ic: IterationContext, tools: list[Tool]) -> list[Tool]:
        hidden = set(self.exclude)
        return [t for t in tools if t.name not in hidden] if hidden else tools
