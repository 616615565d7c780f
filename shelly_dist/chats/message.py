"""The message: who sent it, in which role, with which parts."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from shelly_dist.chats.parts import Part, Text, ToolCall, ToolResult
from shelly_dist.chats.role import Role


class Message(BaseModel):
    """One message of a chat. ``sender`` is the agent instance name, or ``"user"``."""

    sender: str = ""
    role: Role
    parts: list[Part] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def text(cls, sender: str, role: Role | str, text: str) -> Message:
        """A message holding a single text part."""
        return cls(sender=sender, role=Role(role), parts=[Text(text=text)])

    def text_content(self) -> str:
        """The text parts concatenated, with no separator (as Shelly)."""
        return "".join(p.text for p in self.parts if isinstance(p, Text))

    def tool_calls(self) -> list[ToolCall]:
        """The tool-call parts, in order."""
        return [p for p in self.parts if isinstance(p, ToolCall)]

    def tool_results(self) -> list[ToolResult]:
        """The tool-result parts, in order."""
        return [p for p in self.parts if isinstance(p, ToolResult)]

    def get_meta(self, key: str, default: Any = None) -> Any:
        """A metadata value, or ``default``."""
        return self.metadata.get(key, default)
