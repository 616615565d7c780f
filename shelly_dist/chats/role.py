"""Message roles, as Shelly names them."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    """Who a message is from, from the model's point of view."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
