"""The effect contract, the context an effect sees, and the chain that runs an agent's effects.

Shelly's ``agent.Effect`` with its optional ``Resetter``, ``ToolFilter`` and ``ToolProvider``
interfaces, made durable: an effect object holds only its configuration, and everything it
remembers goes into ``IterationContext.state`` — a JSON dict kept in the run's state under the
effect's slot (its index and kind), journaled with each checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, cast, runtime_checkable

from shelly_dist.chats import Chat, Message, Role
from shelly_dist.models import Completer, Usage
from shelly_dist.models.context import estimate_tokens as estimate_tokens  # re-exported
from shelly_dist.tools import Tool, ToolBox


class EffectPhase(StrEnum):
    BEFORE_COMPLETE = "before_complete"
    """Before the model call: context management, nudges, budget checks on the way in."""
    AFTER_COMPLETE = "after_complete"
    """After the reply is appended, before its tools run: trimming, budgets on the way out."""


@dataclass
class IterationContext:
    """What an effect sees of one iteration (Shelly's ``IterationContext``)."""

    phase: EffectPhase
    iteration: int
    """Model calls made so far by this run (0 before the first)."""
    chat: Chat
    completer: Completer
    agent_name: str
    usage: Usage
    """The run's usage so far (every model call of this run, across workers)."""
    last_usage: Usage | None = None
    """The last model call's usage (its input tokens are the real size of the context)."""
    estimated_tokens: int = 0
    """The estimate of the next call's input (chat plus tool definitions) in the server's tokens:
    Shelly's characters / 4 times the ratio learned from the server's counts
    (:class:`~shelly_dist.models.context.ContextWindow`)."""
    context_window: int = 0
    """The provider's window as this process knows it (configured, or read from the server): what
    an effect configured without a window of its own compares with."""
    overflowed: bool = False
    """The last call failed because the prompt did not fit the window: compaction is due now."""
    token_ratio: float = 0.0
    """The server's tokens per estimated token as learned (0: unknown)."""

    def transcript_limit(self) -> int:
        """After an overflow, the characters of transcript a summary request may send: half the
        window in characters as the learned ratio counts them (0: no limit)."""
        if not self.overflowed or self.context_window <= 0:
            return 0
        return int(self.context_window * SUMMARY_SHARE / (self.token_ratio or 1.0) * 4)
    tool_tokens: int = 0
    state: dict[str, Any] = field(default_factory=dict)
    """This effect's memory across iterations, suspensions and workers (JSON values only)."""
    clock: Callable[[], float] = time.time
    """Wall-clock seconds: effects that count time must compare readings taken on different
    machines, so this is ``time.time``, not a monotonic clock."""
    has_tool: Callable[[str], bool] = lambda name: False


SUMMARY_SHARE = 0.5
"""The share of the window the transcript of a summary request after an overflow may take (the
summarizer's prompt and its answer need the rest)."""


@runtime_checkable
class Effect(Protocol):
    """A per-iteration hook. ``evaluate`` may change ``ic.chat``; raising ends the run."""

    kind: str

    async def evaluate(self, ic: IterationContext) -> None: ...


@runtime_checkable
class ToolFilter(Protocol):
    """An effect that narrows the tools the model sees this iteration (intersection semantics)."""

    def filter_tools(self, ic: IterationContext, tools: list[Tool]) -> list[Tool]: ...


@runtime_checkable
class ToolProvider(Protocol):
    """An effect that adds tools to the agent (``offload``'s ``recall``)."""

    def provided_tools(self) -> ToolBox: ...


COMPACTION_KINDS = frozenset({"compact", "sliding_window", "observation_mask"})


def ordered(effects: Sequence[Effect]) -> list[Effect]:
    """Compaction-class effects first, the rest in registration order (Shelly's ``sortEffects``):
    a message another effect injects is then never summarised away in the same iteration."""
    return sorted(effects, key=lambda e: 0 if e.kind in COMPACTION_KINDS else 1)


class EffectChain:
    """An agent's effects in their run order, with one state slot each in the run's state."""

    def __init__(self, effects: Sequence[Effect] = ()) -> None:
        self.effects = ordered(effects)
        self._filters = [(slot, e) for slot, e in self.slots() if _implements(e, "filter_tools")]
        self._providers = [e for e in self.effects if _implements(e, "provided_tools")]

    def __bool__(self) -> bool:
        return bool(self.effects)

    def slots(self) -> list[tuple[str, Effect]]:
        return [(f"{i}:{e.kind}", e) for i, e in enumerate(self.effects)]

    async def run(self, phase: EffectPhase, make: Callable[[dict[str, Any]], IterationContext],
                  states: dict[str, dict[str, Any]]) -> None:
        """Evaluate every effect for ``phase``; the first error propagates (and ends the run)."""
        for slot, effect in self.slots():
            ic = make(states.setdefault(slot, {}))
            ic.phase = phase
            await effect.evaluate(ic)

    def filter_tools(self, make: Callable[[dict[str, Any]], IterationContext],
                     states: dict[str, dict[str, Any]], tools: list[Tool]) -> list[Tool]:
        for slot, effect in self._filters:
            tools = cast(ToolFilter, effect).filter_tools(make(states.setdefault(slot, {})), tools)
        return tools

    def provided_toolboxes(self) -> list[ToolBox]:
        return [cast(ToolProvider, e).provided_tools() for e in self._providers]


def _implements(effect: Effect, method: str) -> bool:
    """Whether ``effect`` has ``method`` — what ``isinstance(effect, ToolFilter)`` (or
    ``ToolProvider``) decides, without the protocol check: that walks the protocol's classes on
    every call (``typing._get_protocol_attrs``), 3 % of the embedded runtime's CPU when it ran for
    every effect of every model call."""
    return getattr(effect, method, None) is not None


# -- helpers the effects share ---------------------------------------------------------------------


def exceeds_threshold(ic: IterationContext, context_window: int | None, threshold: float) -> bool:
    """Shelly's ``exceedsThreshold``: the estimate, or else the last call's reported prompt, has
    reached ``context_window × threshold`` (``None``: the provider's window, ``ic.context_window``).

    A call that overflowed the window (``ic.overflowed``) exceeds every threshold: the effects that
    shrink the chat run before it is retried."""
    window = ic.context_window if context_window is None else context_window
    if window <= 0 or threshold <= 0:
        return False
    if ic.overflowed:
        return True
    limit = int(window * threshold)
    if ic.estimated_tokens > 0 and ic.estimated_tokens >= limit:
        return True
    return ic.last_usage is not None and ic.last_usage.input_tokens >= limit


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis (Shelly's ``truncate``)."""
    return text if len(text) <= limit else text[:limit] + "…"


def nudge(text: str) -> Message:
    """A user-role message an effect injects (Shelly sends these with an empty sender)."""
    return Message.text("", Role.USER, text)


def tool_name_for(messages: Sequence[Message], before: int, call_id: str) -> str:
    """The name of the call ``call_id`` answered by the result at ``before`` ("unknown" if none)."""
    for m in reversed(messages[:before]):
        if m.role == Role.ASSISTANT:
            for call in m.tool_calls():
                if call.id == call_id:
                    return call.name
    return "unknown"


def older_tool_messages(messages: Sequence[Message], keep_recent: int, tag: str) -> list[Message]:
    """Tool-role messages older than the last ``keep_recent`` of them and not yet tagged ``tag``
    (the ones ``trim_tool_results`` and ``offload`` may still rewrite)."""
    tools = [m for m in messages if m.role == Role.TOOL]
    old = tools[: max(len(tools) - keep_recent, 0)]
    return [m for m in old if not m.get_meta(tag)]
