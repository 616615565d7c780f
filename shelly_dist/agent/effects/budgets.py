"""``token_budget`` and ``time_budget``: hard limits on one run, with a wrap-up warning first.

Both count this run only (Shelly resets them at each run). ``time_budget`` counts model inference
time — from just before each model call to just after its reply — so time a run spends suspended
while its children work, or queued for a worker, never counts; the readings are wall-clock
(``time.time``) because the call may start on one worker and its reply be journaled by another.
"""

from __future__ import annotations

from dataclasses import dataclass

from shelly_dist.agent.effects.base import EffectPhase, IterationContext, nudge
from shelly_dist.errors import TimeBudgetExhausted, TokenBudgetExhausted

DEFAULT_WARN = 0.8


def _warn_threshold(value: float) -> float:
    return value if 0 < value < 1 else DEFAULT_WARN


@dataclass
class TokenBudget:
    """Ends the run once its input + output tokens reach ``max_tokens`` (0 = off)."""

    max_tokens: int = 0
    warn_threshold: float = DEFAULT_WARN
    kind: str = "token_budget"

    async def evaluate(self, ic: IterationContext) -> None:
        if ic.phase != EffectPhase.AFTER_COMPLETE or self.max_tokens <= 0:
            return
        used = ic.usage.input_tokens + ic.usage.output_tokens
        ratio = used / self.max_tokens
        if ratio >= 1.0:
            raise TokenBudgetExhausted(agent=ic.agent_name)
        if not ic.state.get("warned") and ratio >= _warn_threshold(self.warn_threshold):
            ic.state["warned"] = True
            ic.chat.append(nudge(
                f"You've used {ratio * 100:.0f}% of your token budget ({used}/{self.max_tokens} tokens). "
                "Prioritize completing the most critical remaining work."))


def _seconds(value: float) -> str:
    """Go's ``Duration.Truncate(time.Second).String()`` for whole seconds: ``1m30s``, ``2h0m5s``."""
    total = int(value)
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{seconds}s"
    if minutes:
        return f"{minutes}m{seconds}s"
    return f"{seconds}s"


@dataclass
class TimeBudget:
    """Ends the run once its model time reaches ``max_duration`` seconds (0 = off)."""

    max_duration: float = 0.0
    warn_threshold: float = DEFAULT_WARN
    kind: str = "time_budget"

    async def evaluate(self, ic: IterationContext) -> None:
        if self.max_duration <= 0:
            return
        state = ic.state
        if ic.phase == EffectPhase.BEFORE_COMPLETE:
            state["call_start"] = ic.clock()
            return
        if state.get("call_start"):
            state["elapsed"] = state.get("elapsed", 0.0) + max(0.0, ic.clock() - state.pop("call_start"))
        elapsed = float(state.get("elapsed", 0.0))
        ratio = elapsed / self.max_duration
        if ratio >= 1.0:
            raise TimeBudgetExhausted(agent=ic.agent_name)
        if not state.get("warned") and ratio >= _warn_threshold(self.warn_threshold):
            state["warned"] = True
            ic.chat.append(nudge(
                f"You've used {ratio * 100:.0f}% of your time budget ({_seconds(elapsed)}/"
                f"{_seconds(self.max_duration)} of LLM inference time). "
                "Prioritize completing the most critical remaining work."))
