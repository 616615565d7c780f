"""Content parts: a pydantic discriminated union on ``kind``.

The kind strings (``text``, ``image``, ``document``, ``tool_call``, ``tool_result``) are Shelly's
and appear in saved sessions and run journals, so they never change.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Part(BaseModel):
    model_config = ConfigDict(frozen=False, extra="forbid")


class Text(_Part):
    """Plain text."""

    kind: Literal["text"] = "text"
    text: str


class Image(_Part):
    """An image, by URL or as base64 ``data`` with its media type."""

    kind: Literal["image"] = "image"
    url: str = ""
    data: str = ""
    media_type: str = ""


class Document(_Part):
    """A document (PDF, text…), as base64 ``data`` with its media type; ``path`` names it."""

    kind: Literal["document"] = "document"
    path: str = ""
    data: str = ""
    media_type: str = ""


class ToolCall(_Part):
    """A model's request to call a tool.

    ``arguments`` is the raw JSON text the model produced. ``metadata`` is opaque provider data
    (Gemini's ``thoughtSignature``) that must survive the round trip back to the provider.
    """

    kind: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: str = "{}"
    metadata: dict[str, str] = Field(default_factory=dict)


class ToolResult(_Part):
    """The outcome of one tool call, matched to it by ``tool_call_id``."""

    kind: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    content: str
    is_error: bool = False


Part = Annotated[Text | Image | Document | ToolCall | ToolResult, Field(discriminator="kind")]
