"""``trim_tool_results``: cut long tool results in older messages, keeping the latest whole.

Runs after each reply. Error results are never cut; a trimmed message is tagged (``trimmed``) so it
is not cut again.
"""

from __future__ import annotations

from dataclasses import dataclass

from shelly_dist.agent.effects.base import EffectPhase, IterationContext, older_tool_messages
from shelly_dist.chats import ToolResult

TRIMMED = "trimmed"
TRIM_SUFFIX = "… [trimmed]"


@dataclass
class TrimToolResults:
    max_result_length: int = 500
    preserve_recent: int = 4
    kind: str = "trim_tool_results"

    def __post_init__(self) -> None:
        self.max_result_length = self.max_result_length if self.max_result_length > 0 else 500
        self.preserve_recent = self.preserve_recent if self.preserve_recent > 0 else 4

    async def evaluate(self, ic: IterationContext) -> None:
        if ic.phase != EffectPhase.AFTER_COMPLETE:
            return
        # Look at the chat's own messages and copy only those to cut: a copy of the whole chat
        # on every reply was 7 % of the embedded runtime's CPU, and most replies cut nothing.
        messages = list(ic.chat.view())
        where = {id(m): i for i, m in enumerate(messages)}
        changed = False
        limit = self.max_result_length
        for old in older_tool_messages(messages, self.preserve_recent, TRIMMED):
            if not any(isinstance(p, ToolResult) and not p.is_error and len(p.content) > limit for p in old.parts):
                continue
            m = old.model_copy(deep=True)
            for j, part in enumerate(m.parts):
                if isinstance(part, ToolResult) and not part.is_error and len(part.content) > limit:
                    m.parts[j] = part.model_copy(update={"content": part.content[:limit] + TRIM_SUFFIX})
            m.metadata[TRIMMED] = True
            messages[where[id(old)]] = m
            changed = True
        if changed:
            ic.chat.replace_all(*messages)
