"""Gemini wire mapping against a loopback server (behaviour 79)."""

from __future__ import annotations

import json

import pytest

from shelly_dist.chats import Message, Role, ToolCall
from shelly_dist.errors import ModelError
from shelly_dist.models import Usage
from shelly_dist.providers.gemini import GeminiCompleter
from shelly_dist.testing.model_server import ModelServer, Reply
from tests.unit.providers.conftest import ToolDef, assistant_calls, chat_of, system, tool_result, user


def make(server: ModelServer) -> GeminiCompleter:
    return GeminiCompleter(model="gemini-test", base_url=server.url, api_key="g-key")


async def test_request_goes_to_generate_content_with_the_goog_key(server: ModelServer) -> None:
    await make(server).complete(chat_of(user()), [])
    req = server.requests[0]
    assert req.path == "/v1beta/models/gemini-test:generateContent"
    assert req.headers["x-goog-api-key"] == "g-key"
    assert req.body["generationConfig"]["maxOutputTokens"] == 8192


async def test_system_prompt_goes_in_system_instruction_and_assistant_is_model(server: ModelServer) -> None:
    chat = chat_of(system("Be kind."), user("a"), user("b"), Message.text("x", Role.ASSISTANT, "c"), user("d"))
    await make(server).complete(chat, [])
    body = server.requests[0].body
    assert body["systemInstruction"] == {"parts": [{"text": "Be kind."}]}
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]
    assert body["contents"][0]["parts"] == [{"text": "a"}, {"text": "b"}]


async def test_tool_schemas_lose_schema_and_additional_properties_at_every_depth(server: ModelServer) -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "items": {"type": "array", "items": {"type": "object", "additionalProperties": False}},
            "choice": {"anyOf": [{"type": "object", "additionalProperties": True}, {"type": "string"}]},
        },
    }
    await make(server).complete(chat_of(user()), [ToolDef("t", "d", schema)])
    params = server.requests[0].body["tools"][0]["functionDeclarations"][0]["parameters"]
    text = json.dumps(params)
    assert "$schema" not in text and "additionalProperties" not in text
    assert params["properties"]["choice"]["anyOf"][1] == {"type": "string"}


async def test_thought_signature_survives_a_round_trip(server: ModelServer) -> None:
    server.push(Reply(text="", tool_calls=[{"name": "t", "arguments": {"q": 1}, "thought_signature": "sig=="}]))
    gemini = make(server)
    reply = await gemini.complete(chat_of(user()), [ToolDef("t")])
    [call] = reply.tool_calls()
    assert call.metadata == {"thoughtSignature": "sig=="}
    assert call.id
    await gemini.complete(chat_of(user(), reply, tool_result(call.id, '{"answer": 42}')), [ToolDef("t")])
    model_turn, result_turn = server.requests[1].body["contents"][1:]
    assert model_turn["parts"] == [{"functionCall": {"name": "t", "args": {"q": 1}}, "thoughtSignature": "sig=="}]
    assert result_turn["parts"] == [{"functionResponse": {"name": "t", "response": {"answer": 42}}}]


async def test_non_json_tool_content_is_wrapped_as_result(server: ModelServer) -> None:
    chat = chat_of(user(), assistant_calls(("c1", "shell", "{}")), tool_result("c1", "plain text"))
    await make(server).complete(chat, [])
    part = server.requests[0].body["contents"][-1]["parts"][0]
    assert part == {"functionResponse": {"name": "shell", "response": {"result": "plain text"}}}


async def test_a_tool_result_without_its_call_is_an_error(server: ModelServer) -> None:
    with pytest.raises(ModelError, match="no tool call found for tool result 'ghost'"):
        await make(server).complete(chat_of(user(), tool_result("ghost", "x")), [])
    assert server.requests == []


async def test_tool_call_ids_are_generated_locally_and_unique(server: ModelServer) -> None:
    server.push(Reply(text="", tool_calls=[{"name": "a"}, {"name": "b"}]))
    reply = await make(server).complete(chat_of(user()), [])
    ids = [c.id for c in reply.tool_calls()]
    assert len(set(ids)) == 2 and all(isinstance(c, ToolCall) for c in reply.tool_calls())


async def test_empty_candidates_is_an_error(server: ModelServer) -> None:
    server.push(Reply(raw={"candidates": []}))
    with pytest.raises(ModelError, match='provider "gemini": empty candidates'):
        await make(server).complete(chat_of(user()), [])


async def test_usage_counts_each_prompt_token_once(server: ModelServer) -> None:
    # promptTokenCount (11) includes cachedContentTokenCount (5): 6 uncached + 5 cached
    server.push(Reply(usage={"input": 11, "output": 3, "cache_read": 5}))
    reply = await make(server).complete(chat_of(user()), [])
    assert Usage.of(reply) == Usage(input_tokens=6, output_tokens=3, cache_read_tokens=5)
    assert Usage.of(reply).total_tokens == 11 + 3
