"""loop_detect, reflection, progress and stall_detect: each says its piece once per occasion,
remembering in its state what it already said; stall_detect ends a run that ignores its nudge."""

from __future__ import annotations

import pytest

from shelly_dist import Message, Role, ScriptedCompleter
from shelly_dist.agent.effects import EffectPhase, IterationContext
from shelly_dist.agent.effects.nudges import LoopDetect, Progress, Reflection, StallDetect
from shelly_dist.chats import Chat
from shelly_dist.errors import StallDetected
from shelly_dist.models import Usage

from .support import tool_turn

SYSTEM = Message.text("tester", Role.SYSTEM, "You are tester.")


def before(chat: Chat, iteration: int = 3, state: dict | None = None, tools: tuple[str, ...] = ()) -> IterationContext:
    return IterationContext(phase=EffectPhase.BEFORE_COMPLETE, iteration=iteration, chat=chat,
                            completer=ScriptedCompleter([]), agent_name="tester", usage=Usage(),
                            state=state if state is not None else {}, has_tool=tools.__contains__)


def nudges(chat: Chat) -> list[str]:
    return [m.text_content() for m in chat.view() if m.role == Role.USER]


async def test_loop_detect_names_the_repeated_call_once_per_new_count():
    chat = Chat([SYSTEM, *[m for i in range(3) for m in tool_turn(f"c{i}", "grep", "none", args='{"q":"x"}')]])
    state: dict = {}
    await LoopDetect(threshold=3).evaluate(before(chat, state=state))
    await LoopDetect(threshold=3).evaluate(before(chat, state=state))
    assert nudges(chat) == ["You have called grep with the same arguments 3 times. This is not making progress. "
                            "Try a different approach or tool."]


async def test_loop_detect_is_silent_below_the_threshold_and_on_the_first_iteration():
    chat = Chat([SYSTEM, *[m for i in range(3) for m in tool_turn(f"c{i}", "grep", "none")]])
    await LoopDetect(threshold=4).evaluate(before(chat))
    await LoopDetect(threshold=3).evaluate(before(chat, iteration=0))
    assert nudges(chat) == []


async def test_reflection_after_consecutive_failed_steps():
    chat = Chat([SYSTEM, *tool_turn("ok", "read", "fine"), *tool_turn("a", "read", "no", error=True),
                 *tool_turn("b", "read", "no", error=True)])
    state: dict = {}
    await Reflection(failure_threshold=2).evaluate(before(chat, state=state))
    await Reflection(failure_threshold=2).evaluate(before(chat, state=state))
    assert len(nudges(chat)) == 1
    assert nudges(chat)[0].startswith("You have encountered 2 consecutive tool failures. Before your next action:")


async def test_progress_asks_for_a_note_every_interval_when_write_note_exists():
    chat = Chat([SYSTEM])
    await Progress(interval=5).evaluate(before(chat, iteration=5, tools=("write_note",)))
    await Progress(interval=5).evaluate(before(chat, iteration=6, tools=("write_note",)))
    await Progress(interval=5).evaluate(before(chat, iteration=10))
    assert nudges(chat) == [
        "You have completed 5 iterations. Write a brief progress note using write_note documenting: (1) what "
        "you've accomplished, (2) what remains, (3) any blockers. This ensures continuity if context is compacted."]


async def test_stall_detect_nudges_once_then_ends_the_run_a_window_later():
    chat = Chat([SYSTEM, *[m for i in range(6) for m in tool_turn(f"c{i}", "ls", "same")]])
    state: dict = {}
    stall = StallDetect(window=6, similarity_threshold=0.8)
    await stall.evaluate(before(chat, iteration=6, state=state))
    assert nudges(chat) == ["You appear stalled. The last 6 iterations produced similar results. "
                            "Step back and reconsider your approach."]
    await stall.evaluate(before(chat, iteration=11, state=state))
    with pytest.raises(StallDetected, match="agent: stall detected"):
        await stall.evaluate(before(chat, iteration=12, state=state))


async def test_stall_detect_ignores_varied_results():
    chat = Chat([SYSTEM, *[m for i in range(6) for m in tool_turn(f"c{i}", "ls", f"different {i}")]])
    await StallDetect().evaluate(before(chat, iteration=6))
    assert nudges(chat) == []
