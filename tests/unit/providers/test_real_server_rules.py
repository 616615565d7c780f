"""What real model servers refuse and count (llama.cpp, vLLM, Ollama, the vendors), against the
loopback server taught each behaviour (issue 22): what we send back is always valid for them."""

from __future__ import annotations

import json

import pytest

from shelly_dist.chats import Message, Role, Text
from shelly_dist.engine.config import config_from_data
from shelly_dist.engine.providers import Providers
from shelly_dist.errors import ContextTooLong, ModelHTTPError
from shelly_dist.models import Usage
from shelly_dist.models.classify import BAD_REQUEST, CONTEXT_OVERFLOW, classify_status
from shelly_dist.providers import create_completer
from shelly_dist.providers.anthropic import AnthropicCompleter
from shelly_dist.providers.gemini import GeminiCompleter
from shelly_dist.providers.openai import OpenAICompleter
from shelly_dist.providers.transport import post_json
from shelly_dist.testing.model_server import ModelServer, Reply
from tests.unit.providers.conftest import ToolDef, assistant_calls, chat_of, system, tool_result, user


def openai(server: ModelServer) -> OpenAICompleter:
    return OpenAICompleter(model="local", base_url=server.url)


def child_chat() -> list[Message]:
    """A delegated child's first turn: system, delegation context, reflections, task."""
    return [system("You are worker."), user("<delegation_context>\nctx\n</delegation_context>"),
            user("<reflections>r</reflections>"), user("do it")]


async def test_a_childs_consecutive_user_turns_are_one_turn_on_a_strict_server() -> None:
    with ModelServer(strict_alternation=True) as server:
        reply = await openai(server).complete(chat_of(*child_chat()), [])
    assert reply.text_content() == "ok"
    [_, turn] = server.requests[0].body["messages"]
    assert turn == {"role": "user", "content": "<delegation_context>\nctx\n</delegation_context>\n\n"
                                               "<reflections>r</reflections>\n\ndo it"}


async def test_consecutive_assistant_turns_are_merged_with_their_tool_calls() -> None:
    chat = chat_of(user(), Message.text("a", Role.ASSISTANT, "thinking"), assistant_calls(("c1", "t", "{}")),
                   tool_result("c1", "r"))
    with ModelServer(strict_alternation=True) as server:
        await openai(server).complete(chat, [ToolDef("t")])
    messages = server.requests[0].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[1]["content"] == "thinking" and messages[1]["tool_calls"][0]["id"] == "c1"


async def test_a_strict_server_refuses_two_user_turns_with_its_own_wording() -> None:
    with ModelServer(strict_alternation=True) as server:
        body = {"model": "m", "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}
        with pytest.raises(ModelHTTPError, match="roles must alternate") as err:
            await post_json(server.url + "/v1/chat/completions", body, headers={}, read_timeout=5,
                            provider="p", model="m")
    assert err.value.status_code == 400 and err.value.kind == BAD_REQUEST


@pytest.mark.parametrize("arguments", ["{", "", "[1, 2]", "not json"])
async def test_tool_call_arguments_are_always_sent_back_as_a_json_object(arguments: str) -> None:
    chat = chat_of(user(), assistant_calls(("c1", "t", arguments)), tool_result("c1", "invalid", is_error=True))
    with ModelServer(strict_arguments=True) as server:
        reply = await openai(server).complete(chat, [ToolDef("t")])
    assert reply.text_content() == "ok"
    sent = server.requests[0].body["messages"][1]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(sent) == ({} if not arguments else {"_raw": arguments})


async def test_valid_arguments_are_sent_back_byte_for_byte() -> None:
    chat = chat_of(user(), assistant_calls(("c1", "t", '{"b": 1,  "a": 2}')), tool_result("c1", "r"))
    with ModelServer(strict_arguments=True) as server:
        await openai(server).complete(chat, [ToolDef("t")])
    assert server.requests[0].body["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"b": 1,  "a": 2}'


@pytest.mark.parametrize("kind", ["anthropic", "gemini"])
async def test_other_vendors_get_the_raw_arguments_in_an_object(kind: str) -> None:
    chat = chat_of(user(), assistant_calls(("c1", "t", "{")), tool_result("c1", "invalid", is_error=True))
    with ModelServer() as server:
        cls = AnthropicCompleter if kind == "anthropic" else GeminiCompleter
        await cls(model="m", base_url=server.url).complete(chat, [ToolDef("t")])
    body = server.requests[0].body
    if kind == "anthropic":
        assert body["messages"][1]["content"][0]["input"] == {"_raw": "{"}
    else:
        assert body["contents"][1]["parts"][0]["functionCall"]["args"] == {"_raw": "{"}


async def test_a_500_naming_our_request_as_malformed_is_not_retried() -> None:
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)

    body = json.dumps({"error": {"code": 500, "message": "Failed to parse tool call arguments as JSON: "
                                 "[json.exception.parse_error.101] parse error", "type": "server_error"}})
    with ModelServer() as server:
        server.push(Reply.error(500, body))
        completer = create_completer("openai", name="local", model="m", base_url=server.url, sleep=sleep)
        with pytest.raises(ModelHTTPError) as err:
            await completer.complete(chat_of(user()), [])
    assert err.value.kind == BAD_REQUEST and len(server.requests) == 1 and waits == []


async def test_llama_cpp_context_overflow_is_a_context_overflow() -> None:
    with ModelServer(context_size=10) as server:
        with pytest.raises(ContextTooLong, match="exceeds the available context size"):
            await openai(server).complete(chat_of(user("x" * 200)), [])


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, '{"error":{"code":400,"message":"request (9000 tokens) exceeds the available context size (8192 '
              'tokens), try increasing it","type":"exceed_context_size_error"}}'),
        (400, '{"object":"error","message":"This model\'s maximum context length is 4096 tokens. However, you '
              'requested 5000 tokens","type":"BadRequestError","code":400}'),
        (400, '{"message":"The decoder prompt (length 5000) is longer than the maximum model length of 4096."}'),
        (500, '{"error":{"message":"prompt too long; exceeded max context length by 12 tokens"}}'),
        (400, '{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 '
              'tokens > 200000 maximum"}}'),
        (400, '{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of '
              'tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}'),
        (400, '{"error":{"message":"This model\'s maximum context length is 128000 tokens.","code":'
              '"context_length_exceeded"}}'),
    ],
    ids=["llama.cpp", "vllm", "vllm-model-length", "ollama", "anthropic", "gemini", "openai"],
)
def test_context_overflow_wordings_of_servers_and_vendors(status: int, body: str) -> None:
    assert classify_status(status, body) == CONTEXT_OVERFLOW


def test_a_plain_500_is_still_a_server_error() -> None:
    assert classify_status(500, '{"error":{"message":"internal error"}}') == "server"


async def test_cached_prompt_tokens_count_once_against_a_prefix_caching_server() -> None:
    shared = "S" * 400
    with ModelServer(prefix_cache=True) as server:
        completer = openai(server)
        first = Usage.of(await completer.complete(chat_of(system(shared), user("a")), []))
        second = Usage.of(await completer.complete(chat_of(system(shared), user("b")), []))
    assert first.cache_read_tokens == 0
    assert second.cache_read_tokens >= 100
    body = server.requests[1].body
    prompt_tokens = (len(json.dumps(body["messages"][0]["content"])) + len("[]")
                     + len(json.dumps(body["messages"][1], sort_keys=True)) + 3) // 4
    assert second.input_tokens + second.cache_read_tokens == prompt_tokens


async def test_anthropic_marks_tools_and_the_shared_system_part_cacheable() -> None:
    prompt = Message(role=Role.SYSTEM, parts=[Text(text="shared sections"), Text(text="\n\n<identity>x</identity>")])
    with ModelServer() as server:
        await AnthropicCompleter(model="m", base_url=server.url).complete(chat_of(prompt, user()), [ToolDef("t")])
        await AnthropicCompleter(model="m", base_url=server.url, prompt_cache=False).complete(
            chat_of(prompt, user()), [ToolDef("t")])
    cached, plain = server.requests[0].body, server.requests[1].body
    assert cached["system"] == [
        {"type": "text", "text": "shared sections", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "\n\n<identity>x</identity>", "cache_control": {"type": "ephemeral"}},
    ]
    assert cached["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in json.dumps(plain)
    assert "".join(b["text"] for b in plain["system"]) == "shared sections\n\n<identity>x</identity>"


async def test_prompt_cache_off_reaches_the_anthropic_provider_from_config() -> None:
    with ModelServer() as server:
        completer = create_completer("anthropic", name="a", model="m", base_url=server.url, prompt_cache=False)
        await completer.complete(chat_of(system(), user()), [ToolDef("t")])
    assert "cache_control" not in json.dumps(server.requests[0].body)


async def test_the_instances_own_prompt_part_heads_the_first_user_turn_on_openai_servers() -> None:
    own = Text(text="\n\n<identity>\nYou are w-1.\n</identity>")
    prompt = Message(role=Role.SYSTEM, parts=[Text(text="shared"), own])
    with ModelServer(strict_alternation=True) as server:
        await openai(server).complete(chat_of(prompt, user("ctx"), user("task")), [ToolDef("t")])
        await openai(server).complete(chat_of(prompt), [])
    first, alone = server.requests[0].body["messages"], server.requests[1].body["messages"]
    assert first == [{"role": "system", "content": "shared"},
                     {"role": "user", "content": "<identity>\nYou are w-1.\n</identity>\n\nctx\n\ntask"}]
    assert alone == [{"role": "system", "content": "shared\n\n<identity>\nYou are w-1.\n</identity>"}]


@pytest.mark.parametrize("prompt_cache", [True, False])
async def test_the_configs_prompt_cache_decides_anthropics_breakpoints(prompt_cache: bool) -> None:
    with ModelServer() as server:
        config = config_from_data({
            "providers": [{"name": "a", "kind": "anthropic", "model": "m", "base_url": server.url,
                           "api_key": "k", "prompt_cache": prompt_cache}],
            "agents": [{"name": "solo"}],
        })
        await Providers(config).for_agent("solo").complete(chat_of(system(), user()), [ToolDef("t")])
    assert ("cache_control" in json.dumps(server.requests[0].body)) is prompt_cache
