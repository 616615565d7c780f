"""Effects that watch the run go astray and tell the model: ``loop_detect`` (the same call again
and again), ``reflection`` (consecutive failing steps), ``progress`` (a periodic note) and
``stall_detect`` (the same results again and again — nudged once, then ended).

Each remembers what it already said in its state, so a run continued elsewhere does not say it
twice.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from shelly_dist.agent.effects.base import EffectPhase, IterationContext, nudge
from shelly_dist.chats import Role, ToolResult
from shelly_dist.errors import StallDetected


def _first_pass(ic: IterationContext) -> bool:
    return ic.phase == EffectPhase.BEFORE_COMPLETE and ic.iteration > 0


@dataclass
class LoopDetect:
    threshold: int = 3
    window_size: int = 10
    kind: str = "loop_detect"

    def __post_init__(self) -> None:
        self.threshold = self.threshold if self.threshold > 0 else 3
        self.window_size = self.window_size if self.window_size > 0 else 10

    async def evaluate(self, ic: IterationContext) -> None:
        if not _first_pass(ic):
            return
        keys: list[tuple[str, str]] = []
        for m in reversed(ic.chat.view()):
            if len(keys) >= self.window_size:
                break
            if m.role == Role.ASSISTANT:
                for call in reversed(m.tool_calls()):
                    if len(keys) < self.window_size:
                        keys.append((call.name, call.arguments))
        if not keys:
            return
        count = 0
        for k in keys:
            if k != keys[0]:
                break
            count += 1
        if count < self.threshold:
            ic.state["last"] = 0
            return
        if count > int(ic.state.get("last", 0)):
            ic.chat.append(nudge(f"You have called {keys[0][0]} with the same arguments {count} times. "
                                 "This is not making progress. Try a different approach or tool."))
            ic.state["last"] = count


REFLECTION_TEXT = """You have encountered {count} consecutive tool failures. Before your next action:
1. Analyze what went wrong in each failed attempt
2. Identify the root cause (wrong path? wrong approach? missing prerequisite?)
3. Describe a different strategy you will try next"""


def consecutive_failed_steps(ic: IterationContext) -> int:
    """Steps (the tool messages after one reply) whose results all failed, newest first."""
    count = 0
    has_error = has_success = in_step = False
    for m in reversed(ic.chat.view()):
        if m.role == Role.ASSISTANT:
            if in_step:
                if has_error and not has_success:
                    count += 1
                else:
                    break
                has_error = has_success = in_step = False
            continue
        if m.role != Role.TOOL:
            break
        in_step = True
        for r in m.tool_results():
            has_error |= r.is_error
            has_success |= not r.is_error
    if in_step and has_error and not has_success:
        count += 1
    return count


@dataclass
class Reflection:
    failure_threshold: int = 2
    kind: str = "reflection"

    def __post_init__(self) -> None:
        self.failure_threshold = self.failure_threshold if self.failure_threshold > 0 else 2

    async def evaluate(self, ic: IterationContext) -> None:
        if not _first_pass(ic):
            return
        count = consecutive_failed_steps(ic)
        if count < self.failure_threshold:
            ic.state["last"] = 0
            return
        if count <= int(ic.state.get("last", 0)):
            return
        ic.state["last"] = count
        ic.chat.append(nudge(REFLECTION_TEXT.format(count=count)))


@dataclass
class Progress:
    interval: int = 5
    kind: str = "progress"

    def __post_init__(self) -> None:
        self.interval = self.interval if self.interval > 0 else 5

    async def evaluate(self, ic: IterationContext) -> None:
        if not _first_pass(ic) or not ic.has_tool("write_note") or ic.iteration % self.interval != 0:
            return
        ic.chat.append(nudge(
            f"You have completed {ic.iteration} iterations. Write a brief progress note using write_note "
            "documenting: (1) what you've accomplished, (2) what remains, (3) any blockers. This ensures "
            "continuity if context is compacted."))


@dataclass
class StallDetect:
    window: int = 6
    similarity_threshold: float = 0.8
    kind: str = "stall_detect"

    def __post_init__(self) -> None:
        self.window = self.window if self.window > 0 else 6
        ok = 0 < self.similarity_threshold <= 1
        self.similarity_threshold = self.similarity_threshold if ok else 0.8

    def fingerprints(self, ic: IterationContext) -> list[str]:
        messages = ic.chat.view()
        names = {c.id: c.name for m in messages if m.role == Role.ASSISTANT for c in m.tool_calls()}
        out: list[str] = []
        for m in reversed(messages):
            if len(out) >= self.window:
                break
            if m.role != Role.TOOL:
                continue
            for part in reversed(m.parts):
                if len(out) >= self.window:
                    break
                if isinstance(part, ToolResult) and part.tool_call_id in names:
                    digest = hashlib.sha256(part.content[:200].encode()).hexdigest()[:16]
                    out.append(f"{names[part.tool_call_id]}\x00{int(part.is_error)}\x00{digest}")
        return out

    async def evaluate(self, ic: IterationContext) -> None:
        if not _first_pass(ic):
            return
        prints = self.fingerprints(ic)
        if len(prints) < self.window:
            return
        duplicates = len(prints) - len(set(prints))
        if duplicates / len(prints) < self.similarity_threshold:
            return
        if ic.state.get("nudged") and ic.iteration >= int(ic.state.get("at", 0)) + self.window:
            raise StallDetected(agent=ic.agent_name)
        if not ic.state.get("nudged"):
            ic.state.update(nudged=True, at=ic.iteration)
            ic.chat.append(nudge(f"You appear stalled. The last {len(prints)} iterations produced similar results. "
                                 "Step back and reconsider your approach."))
