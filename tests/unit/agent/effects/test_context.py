"""Context effects: trim_tool_results, observation_mask, compact, sliding_window and offload."""

from __future__ import annotations

from shelly_dist import Message, Role, ScriptedCompleter
from shelly_dist.agent.effects import EffectPhase, IterationContext
from shelly_dist.agent.effects.compact import COMPACTED, Compact
from shelly_dist.agent.effects.mask import ObservationMask
from shelly_dist.agent.effects.offload import MemoryOffloadStore, Offload
from shelly_dist.agent.effects.trim import TrimToolResults
from shelly_dist.agent.effects.window import SlidingWindow
from shelly_dist.chats import Chat
from shelly_dist.models import Usage

from .support import tool_turn

SYSTEM = Message.text("tester", Role.SYSTEM, "You are tester.")


def context(chat: Chat, phase: EffectPhase, *, last_input: int = 0, completer=None) -> IterationContext:
    return IterationContext(phase=phase, iteration=3, chat=chat, completer=completer or ScriptedCompleter([]),
                            agent_name="tester", usage=Usage(),
                            last_usage=Usage(input_tokens=last_input) if last_input else None)


def results(chat: Chat) -> list[str]:
    return [r.content for m in chat.view() for r in m.tool_results()]


async def test_trim_cuts_old_results_keeps_recent_and_errors_and_never_trims_twice():
    turns = [tool_turn(f"c{i}", "read", "x" * 600) for i in range(5)] + [tool_turn("e", "read", "y" * 600, error=True)]
    chat = Chat([SYSTEM, *[m for t in turns for m in t]])
    await TrimToolResults(max_result_length=10, preserve_recent=2).evaluate(context(chat, EffectPhase.AFTER_COMPLETE))
    out = results(chat)
    assert out[:4] == ["x" * 10 + "… [trimmed]"] * 4
    assert out[4:] == ["x" * 600, "y" * 600]
    rewrites = chat.rewrites
    await TrimToolResults(max_result_length=5, preserve_recent=2).evaluate(context(chat, EffectPhase.AFTER_COMPLETE))
    assert chat.rewrites == rewrites, "already trimmed messages are left alone"


async def test_observation_mask_replaces_old_results_with_placeholders_past_the_threshold():
    turns = [tool_turn(f"c{i}", f"tool{i}", f"result {i} " + "z" * 100) for i in range(4)]
    chat = Chat([SYSTEM, *[m for t in turns for m in t]])
    mask = ObservationMask(context_window=1000, threshold=0.5, recent_window=2)
    await mask.evaluate(context(chat, EffectPhase.BEFORE_COMPLETE, last_input=400))
    assert results(chat)[0] == "result 0 " + "z" * 100, "below the threshold nothing is masked"
    await mask.evaluate(context(chat, EffectPhase.BEFORE_COMPLETE, last_input=500))
    out = results(chat)
    assert out[0] == "[tool result for tool0: result 0 " + "z" * 71 + "…]"
    assert out[3] == "result 3 " + "z" * 100, "the recent window keeps its results"


async def test_compact_replaces_the_chat_with_the_system_prompt_and_a_summary():
    summarizer = ScriptedCompleter(["## Goal\nfix it"])
    chat = Chat([SYSTEM, Message.text("user", Role.USER, "fix it"), *tool_turn("c1", "read", "data")])
    ic = context(chat, EffectPhase.BEFORE_COMPLETE, last_input=900, completer=summarizer)
    await Compact(context_window=1000, threshold=0.8).evaluate(ic)
    assert [m.role for m in chat.view()] == [Role.SYSTEM, Role.USER]
    assert chat.view()[0].text_content() == "You are tester."
    assert chat.view()[1].text_content() == COMPACTED.format(summary="## Goal\nfix it")
    transcript = summarizer.requests[0].messages[1].text_content()
    assert "[user] fix it" in transcript and "Called tool read({})" in transcript and "[tool result] data" in transcript
    assert ic.state == {"compactions": 1}


async def test_a_failed_compaction_leaves_the_chat_and_the_run_goes_on():
    chat = Chat([SYSTEM, Message.text("user", Role.USER, "fix it")])
    failing = ScriptedCompleter([{"error": "overloaded"}])
    await Compact(1000, 0.8).evaluate(context(chat, EffectPhase.BEFORE_COMPLETE, last_input=900, completer=failing))
    assert len(chat) == 2 and chat.rewrites == 0


async def test_sliding_window_summarises_old_trims_medium_and_keeps_recent_whole():
    turns = [tool_turn(f"c{i}", "read", f"r{i} " + "q" * 300) for i in range(6)]  # 12 messages
    chat = Chat([SYSTEM, *[m for t in turns for m in t]])
    summarizer = ScriptedCompleter(["summary one", "summary two"])
    window = SlidingWindow(context_window=1000, threshold=0.5, recent_zone=4, medium_zone=4, trim_length=10)
    ic = context(chat, EffectPhase.BEFORE_COMPLETE, last_input=600, completer=summarizer)
    await window.evaluate(ic)
    view = chat.view()
    assert view[0].role == Role.SYSTEM
    assert view[1].text_content() == "[Context summary — earlier conversation condensed below.]\n\nsummary one"
    out = results(chat)
    assert out[:2] == ["r2 " + "q" * 7 + "… [trimmed]", "r3 " + "q" * 7 + "… [trimmed]"]
    assert out[2:] == ["r4 " + "q" * 300, "r5 " + "q" * 300]
    assert ic.state["summary"] == "summary one"
    chat.append(*[m for i in (6, 7) for m in tool_turn(f"c{i}", "read", f"r{i}")])
    await window.evaluate(ic)
    texts = [m.text_content() for m in chat.view()]
    assert sum(t.startswith("[Context summary") for t in texts) == 1, "one summary message, updated"
    assert "summary one" in summarizer.requests[1].messages[1].text_content(), "the update starts from the old summary"


async def test_a_window_boundary_never_separates_a_call_from_its_result():
    turns = [tool_turn(f"c{i}", "read", "x" * 50) for i in range(5)]
    chat = Chat([SYSTEM, *[m for t in turns for m in t]])
    window = SlidingWindow(context_window=100, threshold=0.1, recent_zone=3, medium_zone=2)
    await window.evaluate(context(chat, EffectPhase.BEFORE_COMPLETE, last_input=90,
                                  completer=ScriptedCompleter(["s"])))
    body = [m for m in chat.view()[2:]]
    assert body[0].role == Role.ASSISTANT, "the kept zones start at a call, not at an orphan result"


async def test_offload_moves_long_results_to_the_store_and_recall_brings_them_back():
    store = MemoryOffloadStore()
    offload = Offload(store, context_window=1000, threshold=0.5, min_result_len=100, recent_window=1)
    chat = Chat([SYSTEM, *tool_turn("c1", "read", "a" * 300), *tool_turn("c2", "read", "b" * 300)])
    await offload.evaluate(context(chat, EffectPhase.AFTER_COMPLETE, last_input=600))
    first, second = results(chat)
    assert first == '[offloaded: use recall("c1") to retrieve. Summary: ' + "a" * 200 + "…]"
    assert second == "b" * 300
    recall = offload.provided_tools().get("recall")
    assert recall is not None
    assert await recall.handler('{"id": "c1"}') == "a" * 300
