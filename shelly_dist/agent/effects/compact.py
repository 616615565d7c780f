"""``compact``: once the context passes ``window × threshold``, ask the model for a structured
summary of the conversation and replace the chat with the system prompt and that summary.

A failed summary leaves the chat as it was and the run goes on (Shelly without an ``AskFunc``);
cancellation always propagates. The compaction rewrites the chat in place, which the run's
checkpoint journals as a rewrite, so a run rebuilt on any worker continues from the summary.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from shelly_dist.agent.effects.base import EffectPhase, IterationContext, exceeds_threshold, truncate
from shelly_dist.chats import Chat, Message, Role, Text, ToolCall, ToolResult
from shelly_dist.models import Completer

logger = logging.getLogger(__name__)

SUMMARIZATION_PROMPT = """You are a conversation summarizer. Summarize this conversation into the following structured format. Be precise — preserve exact file paths, error messages, and technical details.

## Goal
[The original user request — copy verbatim if short, otherwise paraphrase precisely]

## Completed Work
- [Each completed action with file paths and outcomes]

## Files Touched
- [path]: [created/modified/read — and what was done]

## Key Decisions
- [Decision]: [rationale]

## Errors & Blockers
- [Any errors encountered and resolution status]

## Current State
[What the agent is currently working on or just finished]

## Next Steps
1. [Specific next action with enough detail to execute without prior context]
2. [Following action]"""  # noqa: E501

COMPACTED = ("[Conversation compacted — previous context summarized below.]\n\n{summary}\n\n"
             "[Continue executing the next steps listed above. Do not re-read files or repeat work already "
             "marked as completed.]")

MAX_TOOL_ARGS = 200
MAX_TOOL_RESULT = 500


def render(messages: Sequence[Message]) -> str:
    """The conversation as a transcript for the summarizer (system messages left out)."""
    lines = []
    for m in messages:
        if m.role == Role.SYSTEM:
            continue
        for p in m.parts:
            if isinstance(p, Text):
                lines.append(f"[{m.role.value}] {p.text}")
            elif isinstance(p, ToolCall):
                lines.append(f"[{m.role.value}] Called tool {p.name}({truncate(p.arguments, MAX_TOOL_ARGS)})")
            elif isinstance(p, ToolResult):
                label = "tool error" if p.is_error else "tool result"
                lines.append(f"[{label}] {truncate(p.content, MAX_TOOL_RESULT)}")
    return "".join(line + "\n" for line in lines)


def fitted(transcript: str, limit: int) -> str:
    """``transcript`` cut to ``limit`` characters (0: whole) by leaving out its middle: the head
    holds the goal, the tail where the work stands, and a summary request must fit the window
    that the conversation itself no longer fits."""
    if limit <= 0 or len(transcript) <= limit:
        return transcript
    head = limit // 4
    tail = limit - head
    return (f"{transcript[:head]}\n[… {len(transcript) - limit} characters of the conversation left out …]\n"
            f"{transcript[-tail:]}")


async def summarize(chat: Chat, completer: Completer, agent_name: str, *, limit: int = 0) -> str:
    """Replace ``chat`` with its system prompt and a summary of everything else; returns the summary.

    ``limit``: the most characters of transcript to send (0: all of it), for a chat that overflowed."""
    transcript = fitted(render(chat.view()), limit)
    request = Chat([Message.text("", Role.SYSTEM, SUMMARIZATION_PROMPT), Message.text("", Role.USER, transcript)])
    summary = (await completer.complete(request, [])).text_content()
    system = next((m for m in chat.view() if m.role == Role.SYSTEM), None)
    kept = (system.model_copy(deep=True, update={"sender": agent_name}) if system is not None
            else Message.text(agent_name, Role.SYSTEM, ""))  # its parts kept: shared, then own
    chat.replace_all(kept, Message.text("", Role.USER, COMPACTED.format(summary=summary)))
    return summary


@dataclass
class Compact:
    context_window: int | None = 0
    """Tokens; ``None``: the provider's window as this process knows it (learned from the server)."""
    threshold: float = 0.8
    kind: str = "compact"

    async def evaluate(self, ic: IterationContext) -> None:
        if ic.phase != EffectPhase.BEFORE_COMPLETE or not exceeds_threshold(ic, self.context_window, self.threshold):
            return
        try:
            await summarize(ic.chat, ic.completer, ic.agent_name, limit=ic.transcript_limit())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # Shelly without an AskFunc: go on uncompacted
            logger.warning("compact: %s: summary failed, continuing uncompacted: %s", ic.agent_name, exc)
            return
        ic.state["compactions"] = int(ic.state.get("compactions", 0)) + 1
