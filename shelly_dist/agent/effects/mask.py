"""``observation_mask``: past the threshold, replace old tool results with one-line placeholders
(``[tool result for <tool>: <preview>]``), keeping the model's reasoning and calls intact.

The light first tier before compaction. Error results are never masked; a masked message is
tagged (``obs_masked``).
"""

from __future__ import annotations

from dataclasses import dataclass

from shelly_dist.agent.effects.base import EffectPhase, IterationContext, exceeds_threshold, tool_name_for, truncate
from shelly_dist.chats import Role, ToolResult

MASKED = "obs_masked"
PREVIEW = 80


@dataclass
class ObservationMask:
    context_window: int | None = 0
    """Tokens; ``None``: the provider's window as this process knows it (learned from the server)."""
    threshold: float = 0.6
    recent_window: int = 10
    kind: str = "observation_mask"

    def __post_init__(self) -> None:
        self.threshold = self.threshold if self.threshold > 0 else 0.6
        self.recent_window = self.recent_window if self.recent_window > 0 else 10

    async def evaluate(self, ic: IterationContext) -> None:
        if ic.phase != EffectPhase.BEFORE_COMPLETE or not exceeds_threshold(ic, self.context_window, self.threshold):
            return
        messages = ic.chat.messages()
        boundary = len(messages) - self.recent_window
        changed = False
        for i in range(max(boundary, 0)):
            m = messages[i]
            if m.role != Role.TOOL or m.get_meta(MASKED):
                continue
            masked = False
            for j, part in enumerate(m.parts):
                if isinstance(part, ToolResult) and not part.is_error:
                    name = tool_name_for(messages, i, part.tool_call_id)
                    text = f"[tool result for {name}: {truncate(part.content, PREVIEW)}]"
                    m.parts[j] = part.model_copy(update={"content": text})
                    masked = True
            if masked:
                m.metadata[MASKED] = True
                changed = True
        if changed:
            ic.chat.replace_all(*messages)
