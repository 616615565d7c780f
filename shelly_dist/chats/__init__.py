"""Layer 1 — the conversation: roles, content parts, messages and the chat.

Everything here is JSON-serialisable with pydantic, because messages are journaled in Redis and
sent over Celery; nothing here knows about models, tools or agents.
"""

from shelly_dist.chats.chat import Chat
from shelly_dist.chats.message import Message
from shelly_dist.chats.parts import Document, Image, Part, Text, ToolCall, ToolResult
from shelly_dist.chats.role import Role

__all__ = ["Chat", "Document", "Image", "Message", "Part", "Role", "Text", "ToolCall", "ToolResult"]
