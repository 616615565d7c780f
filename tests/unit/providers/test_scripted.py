"""The scripted model: deterministic replays chosen by the chat, and requests recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shelly_dist.chats import Chat, Message, Role, Text, ToolCall, ToolResult
from shelly_dist.engine.config_models import ScriptStep
from shelly_dist.errors import ModelError
from shelly_dist.models import Usage
from shelly_dist.providers import FunctionCompleter, ScriptedCompleter
from shelly_dist.tools import Tool


async def _noop(arguments: str) -> str:
    return ""


TOOLS = [Tool("echo", "echo", {"type": "object"}, _noop), Tool("grep", "grep", {"type": "object"}, _noop)]


def ask(text: str = "do it") -> Chat:
    return Chat([Message.text("sys", Role.SYSTEM, "prompt"), Message.text("user", Role.USER, text)])


async def step(completer: ScriptedCompleter | FunctionCompleter, chat: Chat) -> Message:
    """One model call whose reply is appended, as the agent loop does."""
    reply = await completer.complete(chat, TOOLS)
    chat.append(reply)
    return reply


async def test_replies_are_replayed_in_order() -> None:
    completer = ScriptedCompleter(["one", "two", "three"])
    chat = ask()
    assert [(await step(completer, chat)).text_content() for _ in range(3)] == ["one", "two", "three"]


async def test_reply_is_an_assistant_message() -> None:
    reply = await ScriptedCompleter(["hi"]).complete(ask(), TOOLS)
    assert reply.role is Role.ASSISTANT


async def test_complete_does_not_append_to_the_chat() -> None:
    chat = ask()
    await ScriptedCompleter(["hi"]).complete(chat, TOOLS)
    assert len(chat) == 2


async def test_every_request_records_messages_and_tool_names() -> None:
    completer = ScriptedCompleter(["one", "two"])
    chat = ask("task text")
    await step(completer, chat)
    await completer.complete(chat, TOOLS[:1])
    assert completer.calls == 2
    first, second = completer.requests
    assert [m.text_content() for m in first.messages] == ["prompt", "task text"]
    assert first.tool_names == ["echo", "grep"]
    assert [m.text_content() for m in second.messages] == ["prompt", "task text", "one"]
    assert second.tool_names == ["echo"]


async def test_recorded_messages_are_copies() -> None:
    completer = ScriptedCompleter(["one"])
    chat = ask("before")
    await completer.complete(chat, TOOLS)
    chat.replace(1, Message.text("user", Role.USER, "after"))
    assert completer.requests[0].messages[1].text_content() == "before"


async def test_reply_is_chosen_by_the_number_of_assistant_messages() -> None:
    completer = ScriptedCompleter(["one", "two"])
    chat = ask()
    chat.append(Message.text("a", Role.ASSISTANT, "earlier"))
    assert (await completer.complete(chat, TOOLS)).text_content() == "two"
    assert (await completer.complete(chat, TOOLS)).text_content() == "two"


async def test_a_rebuilt_chat_gets_the_same_reply_from_a_fresh_completer() -> None:
    original = ScriptedCompleter(["one", "two"])
    chat = ask()
    await step(original, chat)
    expected = (await original.complete(chat, TOOLS)).text_content()
    rebuilt = Chat(Message.model_validate_json(m.model_dump_json()) for m in chat.messages())
    assert (await ScriptedCompleter(["one", "two"]).complete(rebuilt, TOOLS)).text_content() == expected == "two"


async def test_task_placeholder_is_replaced_by_the_latest_user_text() -> None:
    completer = ScriptedCompleter(["done: {task}"])
    chat = ask("first")
    chat.append(Message.text("user", Role.USER, "second"))
    assert (await completer.complete(chat, TOOLS)).text_content() == "done: second"


async def test_task_placeholder_ignores_user_role_messages_not_from_the_user() -> None:
    completer = ScriptedCompleter(["done: {task}"])
    chat = ask("real task")
    chat.append(Message.text("shelly", Role.USER, "iteration warning"))
    assert (await completer.complete(chat, TOOLS)).text_content() == "done: real task"


async def test_task_placeholder_is_replaced_inside_tool_call_arguments() -> None:
    spec = {"tool_calls": [{"name": "echo", "arguments": {"text": "{task}", "list": ["x {task}"], "n": 1}}]}
    reply = await ScriptedCompleter([spec]).complete(ask("abc"), TOOLS)
    assert json.loads(reply.tool_calls()[0].arguments) == {"text": "abc", "list": ["x abc"], "n": 1}


async def test_result_placeholder_is_replaced_by_the_latest_tool_results_content() -> None:
    completer = ScriptedCompleter(["first", "you said {result}"])
    chat = ask()
    chat.append(Message.text("a", Role.ASSISTANT, "first"))
    chat.append(Message(role=Role.TOOL, parts=[ToolResult(tool_call_id="c1", content="blue")]))
    assert (await completer.complete(chat, TOOLS)).text_content() == "you said blue"


async def test_exhausted_script_raises_model_error_naming_the_provider() -> None:
    completer = ScriptedCompleter(["only"], name="fake")
    chat = ask()
    await step(completer, chat)
    with pytest.raises(ModelError, match=r'^provider "fake": script exhausted') as info:
        await completer.complete(chat, TOOLS)
    assert info.value.provider == "fake"


async def test_repeat_last_keeps_answering_with_the_final_entry() -> None:
    completer = ScriptedCompleter(["one", "again"], repeat_last=True)
    chat = ask()
    assert [(await step(completer, chat)).text_content() for _ in range(4)] == ["one", "again", "again", "again"]


async def test_repeat_last_with_an_empty_script_still_raises() -> None:
    with pytest.raises(ModelError, match="script exhausted"):
        await ScriptedCompleter([], repeat_last=True).complete(ask(), TOOLS)


async def test_error_spec_raises_model_error_with_its_text() -> None:
    completer = ScriptedCompleter([{"error": "simulated outage"}], name="fake")
    with pytest.raises(ModelError, match=r'^provider "fake": simulated outage') as info:
        await completer.complete(ask(), TOOLS)
    assert info.value.provider == "fake"


async def test_tool_calls_spec_builds_tool_calls_with_text_and_json_arguments() -> None:
    spec = {
        "text": "calling",
        "tool_calls": [
            {"name": "echo", "arguments": {"text": "hi"}},
            {"name": "grep", "arguments": '{"raw": true}', "id": "mine", "metadata": {"thoughtSignature": "s"}},
        ],
    }
    reply = await ScriptedCompleter([spec]).complete(ask(), TOOLS)
    assert reply.text_content() == "calling"
    assert reply.tool_calls() == [
        ToolCall(id="call_0_0", name="echo", arguments='{"text": "hi"}'),
        ToolCall(id="mine", name="grep", arguments='{"raw": true}', metadata={"thoughtSignature": "s"}),
    ]


async def test_generated_tool_call_ids_differ_between_replies() -> None:
    spec = {"tool_calls": [{"name": "echo"}]}
    completer = ScriptedCompleter([spec, spec])
    chat = ask()
    first, second = await step(completer, chat), await step(completer, chat)
    assert first.tool_calls()[0].id != second.tool_calls()[0].id


async def test_message_spec_is_returned_as_a_copy() -> None:
    canned = Message(role=Role.ASSISTANT, parts=[Text(text="canned")])
    reply = await ScriptedCompleter([canned]).complete(ask(), TOOLS)
    reply.parts.clear()
    assert canned.text_content() == "canned"


async def test_delay_spec_awaits_the_injected_sleep() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    reply = await ScriptedCompleter([{"text": "late", "delay": 2.5}], sleep=sleep).complete(ask(), TOOLS)
    assert (slept, reply.text_content()) == ([2.5], "late")


async def test_until_spec_holds_the_reply_until_its_file_exists(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    looks: list[float] = []

    async def sleep(seconds: float) -> None:
        looks.append(seconds)
        if len(looks) == 3:
            gate.touch()

    reply = await ScriptedCompleter([{"text": "released", "until": str(gate)}], sleep=sleep).complete(ask(), TOOLS)
    assert (len(looks), reply.text_content()) == (3, "released")


def test_until_is_a_config_field_of_a_scripted_reply(tmp_path: Path) -> None:
    step = ScriptStep.model_validate({"text": "x", "until": str(tmp_path / "gate")})
    assert step.model_dump()["until"] == str(tmp_path / "gate")


async def test_reply_carries_usage() -> None:
    reply = await ScriptedCompleter(["four"]).complete(ask(), TOOLS)
    usage = Usage.of(reply)
    assert usage.input_tokens > 0 and usage.output_tokens > 0


async def test_function_completer_reply_comes_from_a_sync_function_of_messages_and_tools() -> None:
    def fn(messages: list[Message], tools: list[Tool]) -> str:
        return f"{len(messages)} messages, tools {','.join(t.name for t in tools)}"

    completer = FunctionCompleter(fn)
    assert (await completer.complete(ask(), TOOLS)).text_content() == "2 messages, tools echo,grep"
    assert completer.requests[0].tool_names == ["echo", "grep"]


async def test_function_completer_accepts_an_async_function_returning_a_spec() -> None:
    async def fn(messages: list[Message], tools: list[Tool]) -> dict[str, object]:
        return {"tool_calls": [{"name": "echo", "arguments": {"text": "{task}"}}]}

    reply = await FunctionCompleter(fn).complete(ask("xyz"), TOOLS)
    assert json.loads(reply.tool_calls()[0].arguments) == {"text": "xyz"}


async def test_function_completer_error_spec_raises_model_error_naming_it() -> None:
    completer = FunctionCompleter(lambda m, t: {"error": "nope"}, name="fn")
    with pytest.raises(ModelError, match=r'^provider "fn": nope'):
        await completer.complete(ask(), TOOLS)
