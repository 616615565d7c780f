"""Tool calls without ids (Ollama, llama.cpp, some vLLM builds) each get an id of their own, so
every result reaches the model in the next request, matched to its own call."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shelly_dist.agent import Agent
from shelly_dist.chats import Chat, Message, Role
from shelly_dist.providers.openai import OpenAICompleter
from shelly_dist.testing.model_server import ModelServer, Reply
from shelly_dist.tools import Tool, ToolBox

MISSING = object()


def reply_without_ids(id_value: Any) -> Reply:
    """An OpenAI answer with two ``echo`` calls whose ``id`` is missing, null or ``""``."""
    calls = []
    for text in ("first", "second"):
        call: dict[str, Any] = {"type": "function",
                                "function": {"name": "echo", "arguments": json.dumps({"text": text})}}
        if id_value is not MISSING:
            call["id"] = id_value
        calls.append(call)
    message = {"role": "assistant", "content": None, "tool_calls": calls}
    return Reply(raw={"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                      "usage": {"prompt_tokens": 1, "completion_tokens": 1}})


def echo_box() -> ToolBox:
    async def echo(arguments: str) -> str:
        return "echo:" + json.loads(arguments)["text"]

    schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    return ToolBox([Tool("echo", "echo text", schema, echo)], name="tools")


@pytest.mark.parametrize("id_value", [MISSING, None, ""], ids=["missing", "null", "empty"])
async def test_two_calls_without_ids_each_get_their_own_result(server: ModelServer, id_value: Any) -> None:
    server.push(reply_without_ids(id_value), Reply(text="done"))
    agent = Agent("a", completer=OpenAICompleter(model="llama3", base_url=server.url))
    agent.add_toolboxes(echo_box())
    assert (await agent.run("go")).text_content() == "done"

    messages = server.requests[1].body["messages"]
    [assistant] = [m for m in messages if m["role"] == "assistant"]
    ids = [c["id"] for c in assistant["tool_calls"]]
    assert len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)
    results = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    assert results == {ids[0]: "echo:first", ids[1]: "echo:second"}


async def test_a_repeated_id_in_one_reply_is_replaced(server: ModelServer) -> None:
    server.push(reply_without_ids("call_0"))
    chat = Chat([Message.text("user", Role.USER, "go")])
    reply = await OpenAICompleter(model="llama3", base_url=server.url).complete(chat, [])
    first, second = reply.tool_calls()
    assert first.id == "call_0" and second.id not in ("", "call_0")

