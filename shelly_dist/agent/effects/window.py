"""``sliding_window``: past the threshold, keep the recent messages whole, trim the tool results of
the ones before them, and fold everything older into a running summary the model keeps updating.

Three zones of the non-system messages: *recent* (the last ``recent_zone``, untouched), *medium*
(the ``medium_zone`` before them: tool results cut to ``trim_length``) and *old* (the rest:
summarised by the model into one ``[Context summary …]`` message, updated at every eviction). If
the summary call fails, nothing is evicted or trimmed. The running summary lives in the effect's
state, so it survives a move to another worker.

Two deliberate differences from Go: a zone boundary never falls between an assistant's tool calls
and their results (providers refuse a tool result whose call is gone), it moves back to the
assistant message; and the chat holds one summary message, replaced at each eviction (Go's keeps
the previous one as well).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from shelly_dist.agent.effects.base import EffectPhase, IterationContext, exceeds_threshold
from shelly_dist.agent.effects.compact import render
from shelly_dist.chats import Chat, Message, Role, ToolResult

logger = logging.getLogger(__name__)

SUMMARY_PREFIX = "[Context summary"
SUMMARY_MESSAGE = "[Context summary — earlier conversation condensed below.]\n\n{summary}"
TRIMMED = "sw_trimmed"
PROMPT = """You are a conversation summarizer. You have an existing summary and new messages that are about to be evicted from context. Update the summary to incorporate the new information while keeping it concise. Preserve exact file paths, error messages, and decisions.

Existing summary:
{existing}

New messages to incorporate:
{transcript}

Output ONLY the updated summary in this format:

## Goal
[The original user request]

## Completed Work
- [Each completed action with file paths and outcomes]

## Files Touched
- [path]: [what was done]

## Key Decisions
- [Decision]: [rationale]

## Errors & Blockers
- [Any errors encountered and resolution status]"""  # noqa: E501


def _boundary(messages: Sequence[Message], index: int) -> int:
    """``index`` moved back past tool messages, so a call and its results stay in one zone."""
    while 0 < index < len(messages) and messages[index].role == Role.TOOL:
        index -= 1
    return index


@dataclass
class SlidingWindow:
    context_window: int | None = 0
    """Tokens; ``None``: the provider's window as this process knows it (learned from the server)."""
    threshold: float = 0.7
    recent_zone: int = 10
    medium_zone: int = 10
    trim_length: int = 200
    kind: str = "sliding_window"

    def __post_init__(self) -> None:
        self.recent_zone = self.recent_zone if self.recent_zone > 0 else 10
        self.medium_zone = self.medium_zone if self.medium_zone > 0 else 10
        self.trim_length = self.trim_length if self.trim_length > 0 else 200

    async def evaluate(self, ic: IterationContext) -> None:
        if ic.phase != EffectPhase.BEFORE_COMPLETE or not exceeds_threshold(ic, self.context_window, self.threshold):
            return
        messages = ic.chat.messages()
        start = next((i for i, m in enumerate(messages) if m.role != Role.SYSTEM), len(messages))
        if start < len(messages) and messages[start].text_content().startswith(SUMMARY_PREFIX):
            start += 1
        rest = messages[start:]
        if len(rest) <= self.recent_zone:
            return
        recent_at = _boundary(rest, len(rest) - self.recent_zone)
        medium_at = _boundary(rest, max(recent_at - self.medium_zone, 0))
        old, medium, recent = rest[:medium_at], rest[medium_at:recent_at], rest[recent_at:]
        summary = str(ic.state.get("summary", ""))
        if old:
            try:
                summary = await self._summarize(ic, summary, render(old))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning("sliding_window: %s: summary failed, keeping old messages: %s", ic.agent_name, exc)
                return
            ic.state["summary"] = summary
        for m in medium:
            if m.role != Role.TOOL or m.get_meta(TRIMMED):
                continue
            cut = False
            for j, part in enumerate(m.parts):
                if isinstance(part, ToolResult) and not part.is_error and len(part.content) > self.trim_length:
                    m.parts[j] = part.model_copy(update={"content": part.content[: self.trim_length] + "… [trimmed]"})
                    cut = True
            if cut:
                m.metadata[TRIMMED] = True
        head = [m for m in messages[:start] if m.role == Role.SYSTEM]
        if summary:  # one summary message, replaced at each eviction (Go keeps the old one too)
            head.append(Message.text("", Role.USER, SUMMARY_MESSAGE.format(summary=summary)))
        else:
            head += [m for m in messages[:start] if m.role != Role.SYSTEM]
        ic.chat.replace_all(*head, *medium, *recent)

    async def _summarize(self, ic: IterationContext, existing: str, transcript: str) -> str:
        prompt = PROMPT.format(existing=existing or "(no prior summary)", transcript=transcript)
        request = Chat([Message.text("", Role.SYSTEM, "You are a conversation summarizer."),
                        Message.text("", Role.USER, prompt)])
        return (await ic.completer.complete(request, [])).text_content()
