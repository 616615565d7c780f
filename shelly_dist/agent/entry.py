"""What other agents learn about an agent: its :class:`Entry` in ``list_agents`` and the prompt.

Apart from the registry so the system prompt (below the agent) can list entries without
importing the registry (above it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Entry:
    """What other agents learn about an agent from ``list_agents`` and the system prompt."""

    name: str
    description: str = ""
    skills: list[str] = field(default_factory=list)
    estimated_cost: str = ""
    max_concurrency: int = 0

    def to_json(self) -> dict[str, Any]:
        """Shelly's JSON: every field but ``name`` left out when empty."""
        data: dict[str, Any] = {"name": self.name}
        if self.description:
            data["description"] = self.description
        if self.skills:
            data["skills"] = list(self.skills)
        if self.estimated_cost:
            data["estimated_cost"] = self.estimated_cost
        if self.max_concurrency:
            data["max_concurrency"] = self.max_concurrency
        return data
