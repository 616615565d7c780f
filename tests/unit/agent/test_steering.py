"""Steering in the step machine: a message joins the chat before the next model call (once, even
when the run is rebuilt from a snapshot taken before it was taken), ``interrupt`` skips every call
of the step not started yet, and a run that would end with its plain reply takes another step for a
message that arrived during its last call."""

from __future__ import annotations

from shelly_dist import Message, Role
from shelly_dist.agent import Run
from shelly_dist.agent.steering import SteerMessage
from shelly_dist.chats import ToolResult
from shelly_dist.runtime.local.steering import MemoryInbox

from .helpers import Team, call, calls, echo_toolbox


def user_texts(run: Run) -> list[str]:
    return [m.text_content() for m in run.agent.chat.messages() if m.role == Role.USER]


def results(run: Run) -> list[ToolResult]:
    return [p for m in run.agent.chat.messages() if m.role == Role.TOOL for p in m.parts]  # type: ignore[misc]


def team(inbox: MemoryInbox, replies: list[object]) -> Team:
    t = Team()
    t.add("worker", replies, toolboxes=(echo_toolbox(),), inbox=inbox)
    return t


async def test_a_message_joins_before_the_next_model_call_once() -> None:
    inbox = MemoryInbox()
    t = team(inbox, [call("echo", {"text": "a"}), "done"])
    run = Run.start(t.spawn("worker"), [Message.text("user", Role.USER, "go")], run_id="r1")
    await run.step()  # first model call and its tool: nothing to take yet
    inbox.post("r1", SteerMessage(text="use the blue one"))
    await run.until_done()
    asked = t.completers["worker"][0].requests
    assert [m.text_content() for m in asked[0].messages if m.role == Role.USER] == ["go"]
    assert [m.text_content() for m in asked[1].messages if m.role == Role.USER] == ["go", "use the blue one"]
    assert user_texts(run).count("use the blue one") == 1
    assert run.state.steered == 1


async def test_a_run_rebuilt_from_a_snapshot_before_the_message_was_taken_takes_it_once() -> None:
    inbox = MemoryInbox()
    t = team(inbox, [call("echo", {"text": "a"}), "done"])
    run = Run.start(t.spawn("worker"), [Message.text("user", Role.USER, "go")], run_id="r1")
    await run.step()
    before = run.snapshot()  # the journal's last checkpoint: the message not taken
    inbox.post("r1", SteerMessage(text="use the blue one"))
    await run.until_done()  # took it, then "crashed": its chat is lost with the process

    again = Run.restore(t.spawn("worker"), before)
    again.inbox = inbox
    await again.until_done()
    assert user_texts(again).count("use the blue one") == 1


def post_during_first_call(t: Team, inbox: MemoryInbox, message: SteerMessage) -> None:
    """Post ``message`` to run ``r1`` while the worker's first model call is in flight."""
    completer = t.completers["worker"][0]
    original, posted = completer.complete, []

    async def complete(chat, tools):  # type: ignore[no-untyped-def]
        if not posted:
            posted.append(True)
            inbox.post("r1", message)
        return await original(chat, tools)

    completer.complete = complete  # type: ignore[method-assign]


async def test_interrupt_skips_every_call_of_the_step_not_started() -> None:
    inbox = MemoryInbox()
    t = team(inbox, [calls(("echo", {"text": "a"}), ("echo", {"text": "b"})), "done"])
    run = Run.start(t.spawn("worker"), [Message.text("user", Role.USER, "go")], run_id="r1")
    post_during_first_call(t, inbox, SteerMessage(text="stop now", interrupt=True))
    await run.until_done()
    assert [r.content for r in results(run)] == ["skipped: the user interrupted"] * 2
    assert user_texts(run) == ["go", "stop now"]


async def test_a_message_taken_before_a_call_interrupts_nothing_of_its_reply() -> None:
    inbox = MemoryInbox()
    t = team(inbox, [call("echo", {"text": "a"}), "done"])
    run = Run.start(t.spawn("worker"), [Message.text("user", Role.USER, "go")], run_id="r1")
    inbox.attach(run)
    inbox.post("r1", SteerMessage(text="stop", interrupt=True))
    await run.until_done()
    assert [r.content for r in results(run)] == ["a"]  # the reply answered the message: its calls run


async def test_a_message_during_the_last_call_reopens_a_run_that_would_end() -> None:
    inbox = MemoryInbox()
    t = team(inbox, ["first answer", "second answer"])
    run = Run.start(t.spawn("worker"), [Message.text("user", Role.USER, "go")], run_id="r1")
    post_during_first_call(t, inbox, SteerMessage(text="also mention the rain"))
    reply = await run.until_done()
    assert reply.text_content() == "second answer"
    assert user_texts(run) == ["go", "also mention the rain"]


async def test_pick_names_what_to_pass_when_the_target_is_not_one_live_run() -> None:
    import pytest

    from shelly_dist.errors import UsageError
    from shelly_dist.runtime.local.steering import LiveRun, pick

    runs = [LiveRun("r1", "lead", "lead", 0), LiveRun("r2", "coder-a-1", "coder", 1),
            LiveRun("r3", "coder-b-2", "coder", 1)]
    assert pick(runs, session="s").id == "r1"
    assert pick(runs, session="s", agent="coder-b-2").id == "r3"
    with pytest.raises(UsageError, match=r"2 live runs of agent \"coder\" in session s: .*pick one with --run"):
        pick(runs, session="s", agent="coder")
    with pytest.raises(UsageError, match="no live run of agent \"tester\""):
        pick(runs, session="s", agent="tester")
