"""``offload``: past the threshold, move long tool results out of the context into a store and
leave a placeholder; the ``recall`` tool brings one back by its tool-call id.

The store is wherever the run can reach it again: a directory under the state directory when
embedded, Redis (scoped by session, with the retention TTL) on a worker pool — never a worker's
disk, since the recall may run on another machine. Error results and the latest
``recent_window`` tool messages stay; an offloaded message is tagged (``offloaded``).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, Field

from shelly_dist.agent.effects.base import (
    EffectPhase,
    IterationContext,
    exceeds_threshold,
    older_tool_messages,
    truncate,
)
from shelly_dist.chats import ToolResult
from shelly_dist.errors import ToolError
from shelly_dist.tools import ToolBox, tool_from_model

OFFLOADED = "offloaded"
PREVIEW = 200


class OffloadStore(Protocol):
    """Where offloaded results go; keys are tool-call ids."""

    async def put(self, key: str, text: str) -> None: ...

    async def get(self, key: str) -> str | None: ...


class MemoryOffloadStore:
    """A dict: for tests and one-shot embedded runs."""

    def __init__(self) -> None:
        self.items: dict[str, str] = {}

    async def put(self, key: str, text: str) -> None:
        self.items[key] = text

    async def get(self, key: str) -> str | None:
        return self.items.get(key)


class DirectoryOffloadStore:
    """One file per result in ``root`` (created on first use), for embedded runs."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root / (re.sub(r"[^A-Za-z0-9._-]", "_", key) + ".txt")

    async def put(self, key: str, text: str) -> None:
        def write() -> None:
            self.root.mkdir(parents=True, exist_ok=True)
            self._path(key).write_text(text, encoding="utf-8")

        await asyncio.to_thread(write)

    async def get(self, key: str) -> str | None:
        path = self._path(key)
        return await asyncio.to_thread(lambda: path.read_text(encoding="utf-8") if path.is_file() else None)


class RecallInput(BaseModel):
    id: str = Field(description="The tool call ID of the offloaded content")


@dataclass
class Offload:
    store: OffloadStore
    context_window: int | None = 0
    """Tokens; ``None``: the provider's window as this process knows it (learned from the server)."""
    threshold: float = 0.5
    min_result_len: int = 2000
    recent_window: int = 6
    kind: str = "offload"

    def __post_init__(self) -> None:
        self.threshold = self.threshold if self.threshold > 0 else 0.5
        self.min_result_len = self.min_result_len if self.min_result_len > 0 else 2000
        self.recent_window = self.recent_window if self.recent_window >= 0 else 6

    def provided_tools(self) -> ToolBox:
        async def recall(inp: RecallInput) -> str:
            text = await self.store.get(inp.id)
            if text is None:
                raise ToolError(f'offload: no offloaded content for ID "{inp.id}"', tool="recall")
            return text

        return ToolBox([tool_from_model(
            "recall", "Retrieve content that was offloaded from context to save tokens. Pass the tool call ID "
            "shown in the offload placeholder.", RecallInput, recall)], name="offload")

    async def evaluate(self, ic: IterationContext) -> None:
        if ic.phase != EffectPhase.AFTER_COMPLETE or not exceeds_threshold(ic, self.context_window, self.threshold):
            return
        messages = ic.chat.messages()
        changed = False
        for m in older_tool_messages(messages, self.recent_window, OFFLOADED):
            moved = False
            for j, part in enumerate(m.parts):
                if not isinstance(part, ToolResult) or part.is_error or len(part.content) < self.min_result_len:
                    continue
                await self.store.put(part.tool_call_id, part.content)
                text = (f'[offloaded: use recall("{part.tool_call_id}") to retrieve. '
                        f"Summary: {truncate(part.content, PREVIEW)}]")
                m.parts[j] = part.model_copy(update={"content": text})
                moved = True
            if moved:
                m.metadata[OFFLOADED] = True
                changed = True
        if changed:
            ic.chat.replace_all(*messages)
