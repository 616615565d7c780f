"""A model call whose prompt overflowed the window: shrink the chat and retry it once.

Why: a session whose chat outgrew the server's window failed every later message the same way
(measured against llama.cpp: a German session stuck from turn 7 on), because nothing reacted to
``ContextTooLong``. Now the run reacts in the same step, on either runtime:

1. the provider has already learned the window from the error's body where it says one
   (llama.cpp's ``n_ctx``; :mod:`shelly_dist.models.context`);
2. the agent's own effects that shrink a chat (``compact``, ``sliding_window``,
   ``observation_mask``) run at once, as if their threshold were passed;
3. if none of them changed the chat, it is compacted anyway (a summary, as ``compact`` makes):
   a run that cannot continue otherwise is worth one summary, whatever the effects say;
4. the call is retried once. A prompt that still does not fit fails with one line naming the
   sizes and the fix (a single message too large for any window, usually).

The rewritten chat is checkpointed before the retry, so a worker that dies in between continues
from the compacted chat and the next turn of the session starts small.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from shelly_dist import events
from shelly_dist.agent.effects import EffectChain, EffectPhase, IterationContext
from shelly_dist.agent.effects.compact import summarize
from shelly_dist.chats import Chat, Message
from shelly_dist.errors import ContextTooLong
from shelly_dist.models import Completer
from shelly_dist.models.context import ContextWindow, estimate_tokens
from shelly_dist.tools import Tool

logger = logging.getLogger(__name__)

CONTEXT_OVERFLOW = "context_overflow"
"""The ``warning`` event's code when a call overflowed the window and the chat was shrunk."""


def sizes(chat: Chat, tools: Sequence[Tool], window: ContextWindow | None) -> tuple[int, int, int]:
    """(the prompt, its largest message, the window), in the server's tokens as far as known."""
    view = chat.view()
    scale = window.estimate if window is not None else (lambda raw: raw)
    largest = max((estimate_tokens([m]) for m in view), default=0)
    return scale(estimate_tokens(view, tools)), scale(largest), window.effective if window is not None else 0


def too_long(exc: ContextTooLong, chat: Chat, tools: Sequence[Tool], window: ContextWindow | None) -> ContextTooLong:
    """The one-line error of a prompt that does not fit even after compaction."""
    prompt, largest, tokens = sizes(chat, tools, window)
    where = f"the window of {tokens} tokens" if tokens else "the model's window"
    named = f'provider "{exc.provider}": ' if exc.provider else ""
    return ContextTooLong(
        named + f"context overflow: the prompt (~{prompt} tokens, its "
        f"largest message ~{largest}) does not fit {where} even after compacting the conversation; shorten "
        "that message, or give the model a larger window (the provider's context_window and the server's "
        "context size, e.g. llama-server --ctx-size)",
        provider=exc.provider, model=exc.model, status_code=exc.status_code, body=exc.body,
    )


async def complete_or_shrink(
    completer: Completer,
    chat: Chat,
    tools: list[Tool],
    *,
    agent_name: str,
    effects: EffectChain,
    states: dict[str, dict],
    context: Callable[[dict], IterationContext],
    window: ContextWindow | None,
    checkpoint: Callable[[], Awaitable[None]],
    emit: Callable[..., None],
) -> Message:
    """``completer.complete(chat, tools)``, shrinking the chat and retrying once on an overflow."""
    try:
        return await completer.complete(chat, tools)
    except ContextTooLong as exc:
        first = exc
    prompt, largest, tokens = sizes(chat, tools, window)
    if tokens and largest >= tokens:  # no summary keeps what that one message asks
        raise too_long(first, chat, tools, window) from first
    rewrites = chat.rewrites

    def overflowed(slot: dict) -> IterationContext:
        ic = context(slot)
        ic.overflowed = True
        return ic

    if effects:
        await effects.run(EffectPhase.BEFORE_COMPLETE, overflowed, states)
    if chat.rewrites == rewrites:
        try:
            await summarize(chat, completer, agent_name, limit=overflowed({}).transcript_limit())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the summary itself did not fit, or the model failed
            logger.warning("overflow: %s: compacting failed: %s", agent_name, exc)
    if chat.rewrites == rewrites:
        raise too_long(first, chat, tools, window) from first
    emit(events.WARNING, code=CONTEXT_OVERFLOW,
         message=f"the prompt (~{prompt} tokens) did not fit the window"
                 + (f" of {tokens} tokens" if tokens else "") + ": the conversation was compacted and the call retried")
    await checkpoint()
    try:
        return await completer.complete(chat, tools)
    except ContextTooLong as again:
        raise too_long(again, chat, tools, window) from again
