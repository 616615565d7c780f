"""OpenAI-compatible wire mapping against a loopback server (behaviours 77–78), and Grok."""

from __future__ import annotations

import pytest

from shelly_dist.chats import Document, Image, Message, Role, Text, ToolResult
from shelly_dist.errors import ModelError, ModelHTTPError
from shelly_dist.models import Usage
from shelly_dist.providers.grok import GrokCompleter
from shelly_dist.providers.openai import OpenAICompleter
from shelly_dist.testing.model_server import ModelServer, Reply
from tests.unit.providers.conftest import ToolDef, assistant_calls, chat_of, system, tool_result, user


def make(server: ModelServer, **kw: object) -> OpenAICompleter:
    return OpenAICompleter(model="gpt-test", base_url=server.url, api_key="sk-oa", **kw)  # type: ignore[arg-type]


async def test_request_goes_to_v1_chat_completions_with_bearer_auth(server: ModelServer) -> None:
    await make(server).complete(chat_of(user()), [])
    req = server.requests[0]
    assert req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == "Bearer sk-oa"
    assert req.body["model"] == "gpt-test"


async def test_a_base_url_already_ending_in_v1_is_not_doubled(server: ModelServer) -> None:
    await OpenAICompleter(model="llama3", base_url=server.url + "/v1").complete(chat_of(user()), [])
    assert server.requests[0].path == "/v1/chat/completions"
    assert "authorization" not in server.requests[0].headers


async def test_tools_are_sent_as_functions(server: ModelServer) -> None:
    schema = {"type": "object", "properties": {"p": {"type": "string"}}}
    await make(server).complete(chat_of(user()), [ToolDef("fs_read", "read", schema)])
    assert server.requests[0].body["tools"] == [
        {"type": "function", "function": {"name": "fs_read", "description": "read", "parameters": schema}}
    ]


async def test_a_missing_schema_becomes_an_object_schema(server: ModelServer) -> None:
    await make(server).complete(chat_of(user()), [ToolDef("t", input_schema={})])
    assert server.requests[0].body["tools"][0]["function"]["parameters"] == {"type": "object"}


async def test_null_content_with_tool_calls_becomes_tool_calls(server: ModelServer) -> None:
    server.push(Reply(text="", tool_calls=[{"id": "call_7", "name": "t", "arguments": {"a": 1}}]))
    reply = await make(server).complete(chat_of(user()), [ToolDef("t")])
    assert reply.text_content() == ""
    [call] = reply.tool_calls()
    assert (call.id, call.name, call.arguments) == ("call_7", "t", '{"a": 1}')


async def test_after_a_tool_result_the_last_message_has_role_tool(server: ModelServer) -> None:
    chat = chat_of(user(), assistant_calls(("c1", "t", "{}")), tool_result("c1", "done"))
    await make(server).complete(chat, [])
    assert server.requests[0].body["messages"][-1] == {"role": "tool", "tool_call_id": "c1", "content": "done"}


async def test_all_roles_map_in_order_and_assistant_without_text_has_null_content(server: ModelServer) -> None:
    chat = chat_of(system("sys"), user("hi"), assistant_calls(("c1", "t", '{"x":1}')), tool_result("c1", "r"))
    await make(server).complete(chat, [])
    messages = server.requests[0].body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    assert messages[0]["content"] == "sys"
    assert messages[2]["content"] is None
    assert messages[2]["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "t", "arguments": '{"x":1}'}}
    ]


async def test_one_tool_message_with_two_results_becomes_two_tool_messages(server: ModelServer) -> None:
    both = Message(
        role=Role.TOOL,
        parts=[ToolResult(tool_call_id="c1", content="a"), ToolResult(tool_call_id="c2", content="b", is_error=True)],
    )
    chat = chat_of(user(), assistant_calls(("c1", "t", "{}"), ("c2", "t", "{}")), both)
    await make(server).complete(chat, [])
    assert server.requests[0].body["messages"][-2:] == [
        {"role": "tool", "tool_call_id": "c1", "content": "a"},
        {"role": "tool", "tool_call_id": "c2", "content": "b"},
    ]


async def test_images_and_documents_switch_content_to_an_array(server: ModelServer) -> None:
    msg = Message(
        sender="user",
        role=Role.USER,
        parts=[
            Text(text="see"),
            Image(data="aW1n", media_type="image/png"),
            Document(data="cGRm", media_type="application/pdf"),
            Document(path="/tmp/spec.pdf", data="cGRm", media_type="application/pdf"),
        ],
    )
    await make(server).complete(chat_of(msg), [])
    content = server.requests[0].body["messages"][0]["content"]
    assert content[0] == {"type": "text", "text": "see"}
    assert content[1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,aW1n"}}
    assert content[2] == {
        "type": "file",
        "file": {"filename": "document", "file_data": "data:application/pdf;base64,cGRm"},
    }
    assert content[3]["file"]["filename"] == "spec.pdf"


async def test_cached_tokens_are_counted_once(server: ModelServer) -> None:
    # prompt_tokens (100) includes prompt_tokens_details.cached_tokens (60), as OpenAI sends it
    server.push(Reply(usage={"input": 100, "output": 7, "cache_read": 60}))
    reply = await make(server).complete(chat_of(user()), [])
    assert Usage.of(reply) == Usage(input_tokens=40, output_tokens=7, cache_read_tokens=60)
    assert Usage.of(reply).total_tokens == 107


async def test_empty_choices_is_an_error(server: ModelServer) -> None:
    server.push(Reply(raw={"choices": [], "usage": {}}))
    with pytest.raises(ModelError, match='provider "openai": empty choices'):
        await make(server).complete(chat_of(user()), [])


async def test_429_is_a_rate_limit_error_with_retry_after(server: ModelServer) -> None:
    server.push(Reply.error(429, retry_after="3"))
    with pytest.raises(ModelHTTPError) as info:
        await make(server).complete(chat_of(user()), [])
    assert (info.value.kind, info.value.status_code, info.value.retry_after) == ("rate_limit", 429, 3.0)


async def test_grok_speaks_the_same_format_and_says_empty_response(server: ModelServer) -> None:
    grok = GrokCompleter(model="grok-4", base_url=server.url, api_key="xai")
    assert (await grok.complete(chat_of(user()), [])).text_content() == "ok"
    assert server.requests[0].path == "/v1/chat/completions"
    assert server.requests[0].headers["authorization"] == "Bearer xai"
    server.push(Reply(raw={"choices": []}))
    with pytest.raises(ModelError, match='provider "grok": empty response'):
        await grok.complete(chat_of(user()), [])


def test_grok_defaults_to_the_xai_api() -> None:
    assert GrokCompleter(model="grok-4").url == "https://api.x.ai/v1/chat/completions"
