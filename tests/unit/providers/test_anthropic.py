"""Anthropic wire mapping against a loopback server (behaviours 75–76)."""

from __future__ import annotations

import pytest

from shelly_dist.chats import Document, Image, Message, Role, Text
from shelly_dist.errors import ModelHTTPError
from shelly_dist.models import Usage
from shelly_dist.providers.anthropic import AnthropicCompleter
from shelly_dist.testing.model_server import ModelServer, Reply
from tests.unit.providers.conftest import ToolDef, assistant_calls, chat_of, system, tool_result, user


def make(server: ModelServer, **kw: object) -> AnthropicCompleter:
    return AnthropicCompleter(model="claude-test", base_url=server.url, api_key="sk-ant", **kw)  # type: ignore[arg-type]


async def test_request_goes_to_v1_messages_with_key_version_and_json_headers(server: ModelServer) -> None:
    await make(server).complete(chat_of(user()), [])
    req = server.requests[0]
    assert req.path == "/v1/messages"
    assert req.headers["x-api-key"] == "sk-ant"
    assert req.headers["anthropic-version"] == "2023-06-01"
    assert req.headers["content-type"] == "application/json"
    assert "authorization" not in req.headers


async def test_system_prompt_is_a_cached_block_and_no_message_has_role_system(server: ModelServer) -> None:
    await make(server).complete(chat_of(system("Be brief."), user()), [])
    body = server.requests[0].body
    assert body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    assert all(m["role"] != "system" for m in body["messages"])


async def test_only_the_last_tool_carries_cache_control_and_the_top_level_none(server: ModelServer) -> None:
    await make(server).complete(chat_of(user()), [ToolDef("a"), ToolDef("b")])
    body = server.requests[0].body
    assert "cache_control" not in body["tools"][0]
    assert body["tools"][1]["cache_control"] == {"type": "ephemeral"}
    assert body["tools"][1]["input_schema"] == {"type": "object", "properties": {}}
    assert "cache_control" not in body


async def test_is_error_is_sent_only_on_failed_tool_results(server: ModelServer) -> None:
    chat = chat_of(
        user(),
        assistant_calls(("c1", "ok_tool", "{}"), ("c2", "bad_tool", "{}")),
        tool_result("c1", "fine"),
        tool_result("c2", "boom", is_error=True),
    )
    await make(server).complete(chat, [])
    ok, bad = server.requests[0].body["messages"][-1]["content"]
    assert "is_error" not in ok
    assert bad["is_error"] is True


async def test_tool_results_are_grouped_into_one_user_message(server: ModelServer) -> None:
    chat = chat_of(
        user(),
        assistant_calls(("c1", "t", '{"x": 1}'), ("c2", "t", "{}")),
        tool_result("c1", "one"),
        tool_result("c2", "two"),
    )
    await make(server).complete(chat, [])
    messages = server.requests[0].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert [b["tool_use_id"] for b in messages[2]["content"]] == ["c1", "c2"]
    assert messages[1]["content"][0] == {"type": "tool_use", "id": "c1", "name": "t", "input": {"x": 1}}


async def test_consecutive_same_role_messages_are_merged(server: ModelServer) -> None:
    await make(server).complete(chat_of(user("a"), user("b")), [])
    assert server.requests[0].body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    ]


async def test_tool_use_input_defaults_to_an_empty_object(server: ModelServer) -> None:
    await make(server).complete(chat_of(user(), assistant_calls(("c1", "t", "")), tool_result("c1", "r")), [])
    assert server.requests[0].body["messages"][1]["content"][0]["input"] == {}


async def test_images_and_documents_are_base64_sources(server: ModelServer) -> None:
    msg = Message(
        sender="user",
        role=Role.USER,
        parts=[
            Text(text="look"),
            Image(data="aW1n", media_type="image/jpeg"),
            Document(path="r.pdf", data="cGRm", media_type="application/pdf"),
        ],
    )
    await make(server).complete(chat_of(msg), [])
    _, image, doc = server.requests[0].body["messages"][0]["content"]
    assert image == {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "aW1n"}}
    assert doc == {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "cGRm"}}


@pytest.mark.parametrize(("temperature", "sent"), [(None, False), (0.0, False), (0.7, True)])
async def test_temperature_is_omitted_unless_set_and_nonzero(
    server: ModelServer, temperature: float | None, sent: bool
) -> None:
    await make(server, temperature=temperature).complete(chat_of(user()), [])
    assert ("temperature" in server.requests[0].body) is sent


async def test_max_tokens_defaults_to_4096(server: ModelServer) -> None:
    await make(server).complete(chat_of(user()), [])
    assert server.requests[0].body["max_tokens"] == 4096


async def test_tool_use_block_becomes_a_tool_call_with_the_same_id_and_name(server: ModelServer) -> None:
    server.push(Reply(text="let me", tool_calls=[{"id": "toolu_9", "name": "fs_read", "arguments": {"p": "a"}}]))
    reply = await make(server).complete(chat_of(user()), [ToolDef("fs_read")])
    [call] = reply.tool_calls()
    assert (call.id, call.name, call.arguments) == ("toolu_9", "fs_read", '{"p": "a"}')
    assert reply.text_content() == "let me"
    assert reply.role == Role.ASSISTANT


async def test_usage_is_recorded_per_call_and_accumulates(server: ModelServer) -> None:
    u = {"input": 20, "output": 10, "cache_creation": 3, "cache_read": 4}
    server.push(Reply(usage=u), Reply(usage=u))
    completer = make(server)
    first = await completer.complete(chat_of(user()), [])
    await completer.complete(chat_of(user()), [])
    assert Usage.of(first) == Usage(input_tokens=20, output_tokens=10, cache_creation_tokens=3, cache_read_tokens=4)
    total = completer.usage.total()
    assert (total.input_tokens, total.output_tokens) == (40, 20)
    assert (total.cache_creation_tokens, total.cache_read_tokens) == (6, 8)


async def test_http_401_is_an_auth_error_that_names_the_provider_and_401(server: ModelServer) -> None:
    server.push(Reply.error(401))
    with pytest.raises(ModelHTTPError) as info:
        await make(server, name="claude").complete(chat_of(user()), [])
    assert info.value.kind == "auth"
    assert str(info.value).startswith('provider "claude": HTTP 401')
    assert info.value.provider == "claude"
