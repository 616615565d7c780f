"""The HTTP base: URLs, headers, timeouts and error classification, against a loopback server."""

from __future__ import annotations

import pytest

from shelly_dist.errors import ContextTooLong, ModelError, ModelHTTPError
from shelly_dist.providers.anthropic import AnthropicCompleter
from shelly_dist.providers.http import aclose_http_client, api_url
from shelly_dist.providers.openai import OpenAICompleter
from shelly_dist.providers.transport import http_session
from shelly_dist.testing.model_server import ModelServer, Reply
from tests.conftest import free_port
from tests.unit.providers.conftest import chat_of, user


def make(base_url: str, **kw: object) -> OpenAICompleter:
    return OpenAICompleter(model="m", name="local", base_url=base_url, api_key="k", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("base", "url"),
    [
        ("http://h", "http://h/v1/messages"),
        ("http://h/", "http://h/v1/messages"),
        ("http://h/v1", "http://h/v1/messages"),
        ("http://h/v1/", "http://h/v1/messages"),
        ("http://h/proxy/anthropic", "http://h/proxy/anthropic/v1/messages"),
    ],
)
def test_base_url_is_the_api_root_and_v1_is_appended_once(base: str, url: str) -> None:
    assert api_url(base, "v1", "/messages") == url


def test_a_base_url_ending_in_another_version_is_kept() -> None:
    assert (
        api_url("http://h/v1beta", "v1beta", "/models/x:generateContent") == "http://h/v1beta/models/x:generateContent"
    )


async def test_an_event_loop_shares_one_session_until_it_is_closed() -> None:
    first = http_session()
    assert http_session() is first
    await aclose_http_client()
    assert first.closed and http_session() is not first


async def test_extra_headers_are_sent_and_may_override_auth(server: ModelServer) -> None:
    completer = make(server.url, headers={"X-Team": "blue", "Authorization": "Token custom"})
    await completer.complete(chat_of(user()), [])
    headers = server.requests[0].headers
    assert headers["x-team"] == "blue"
    assert headers["authorization"] == "Token custom"


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (429, None, "rate_limit"),
        (529, None, "overloaded"),
        (503, None, "overloaded"),
        (500, None, "server"),
        (502, None, "server"),
        (504, None, "timeout"),
        (401, None, "auth"),
        (403, None, "auth"),
        (402, None, "billing"),
        (400, '{"error": {"message": "Your credit balance is too low"}}', "billing"),
        (429, '{"error": {"code": "insufficient_quota"}}', "billing"),
        (400, None, "bad_request"),
        (404, None, "bad_request"),
    ],
)
async def test_error_statuses_are_classified(server: ModelServer, status: int, body: str | None, kind: str) -> None:
    server.push(Reply.error(status, body))
    with pytest.raises(ModelHTTPError) as info:
        await make(server.url).complete(chat_of(user()), [])
    assert (info.value.kind, info.value.status_code, info.value.provider) == (kind, status, "local")


async def test_a_context_overflow_is_context_too_long(server: ModelServer) -> None:
    server.push(Reply.error(400, '{"error": {"code": "context_length_exceeded", "message": "maximum context"}}'))
    with pytest.raises(ContextTooLong) as info:
        await make(server.url).complete(chat_of(user()), [])
    assert info.value.kind == "context_overflow"
    assert info.value.status_code == 400
    assert str(info.value).startswith('provider "local": HTTP 400 context overflow')


async def test_the_message_names_provider_and_cause_and_keeps_a_short_body(server: ModelServer) -> None:
    server.push(Reply.error(529, '{"type":"error","error":{"type":"overloaded_error"}}' + "x" * 2000))
    with pytest.raises(ModelHTTPError) as info:
        await AnthropicCompleter(model="m", name="claude", base_url=server.url).complete(chat_of(user()), [])
    assert str(info.value).startswith('provider "claude": HTTP 529 overloaded: {"type":"error"')
    assert len(info.value.body) == 512


async def test_retry_after_as_an_http_date_is_parsed(server: ModelServer) -> None:
    server.push(Reply.error(503, retry_after="Wed, 21 Oct 2015 07:28:00 GMT"))
    with pytest.raises(ModelHTTPError) as info:
        await make(server.url).complete(chat_of(user()), [])
    assert info.value.retry_after == 0.0


async def test_a_malformed_json_answer_is_a_server_error(server: ModelServer) -> None:
    server.push(Reply(malformed=True))
    with pytest.raises(ModelHTTPError) as info:
        await make(server.url).complete(chat_of(user()), [])
    assert info.value.kind == "server"
    assert "malformed JSON" in str(info.value)


async def test_an_answer_of_the_wrong_shape_is_a_server_error(server: ModelServer) -> None:
    server.push(Reply(raw={"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}))
    with pytest.raises(ModelHTTPError, match="unexpected answer shape") as info:
        await make(server.url).complete(chat_of(user()), [])
    assert info.value.kind == "server"


async def test_a_slow_answer_past_the_timeout_is_a_timeout_error(server: ModelServer) -> None:
    server.push(Reply(delay=30))
    with pytest.raises(ModelHTTPError) as info:
        await make(server.url, timeout=0.2).complete(chat_of(user()), [])
    assert info.value.kind == "timeout"
    assert str(info.value).startswith('provider "local": timeout')


async def test_an_unreachable_server_is_a_network_error() -> None:
    with pytest.raises(ModelHTTPError) as info:
        await make(f"http://127.0.0.1:{free_port()}").complete(chat_of(user()), [])
    assert info.value.kind == "network"
    assert isinstance(info.value, ModelError)
