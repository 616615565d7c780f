"""The transport's failure translation with answers the scripted model server cannot give: a raw
loopback socket server that drops, stalls or redirects, and a ``Retry-After`` in seconds."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest

from shelly_dist.errors import ModelHTTPError
from shelly_dist.providers.transport import _proxy, post_json
from shelly_dist.testing.model_server import ModelServer, Reply

Handler = Callable[[bytes, asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]]


@pytest.fixture
async def raw_server() -> AsyncIterator[Callable[[Handler], Coroutine[Any, Any, str]]]:
    """Start a loopback server running ``handler(head, reader, writer)`` on each connection once it has
    read the request head; returns the server's chat-completions URL."""
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> str:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            try:
                await handler(head, reader, writer)
            finally:
                writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


async def post(url: str, read_timeout: float | None = None) -> Any:
    return await post_json(url, {"model": "m"}, headers={}, read_timeout=read_timeout, provider="local", model="m")


async def test_a_connection_closed_before_the_answer_is_a_network_error(raw_server) -> None:
    async def hang_up(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        return

    with pytest.raises(ModelHTTPError) as info:
        await post(await raw_server(hang_up))
    assert info.value.kind == "network"
    assert str(info.value).startswith('provider "local": network: ')


async def test_an_answer_cut_off_mid_body_is_a_network_error(raw_server) -> None:
    async def cut(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\"")
        await writer.drain()

    with pytest.raises(ModelHTTPError) as info:
        await post(await raw_server(cut))
    assert info.value.kind == "network"


async def test_a_server_stalling_mid_body_past_the_timeout_is_a_timeout_error(raw_server) -> None:
    release = asyncio.Event()

    async def stall(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\"")
        await writer.drain()
        await release.wait()

    try:
        with pytest.raises(ModelHTTPError) as info:
            await post(await raw_server(stall), read_timeout=0.2)
    finally:
        release.set()
    assert info.value.kind == "timeout"


async def test_a_redirect_is_not_followed_but_classified_as_an_error_answer(raw_server) -> None:
    async def redirect(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:9/elsewhere\r\n"
                     b"Content-Length: 0\r\n\r\n")
        await writer.drain()

    with pytest.raises(ModelHTTPError) as info:
        await post(await raw_server(redirect))
    assert info.value.status_code == 307


async def test_retry_after_in_seconds_is_parsed(server: ModelServer) -> None:
    server.push(Reply.error(429, retry_after="7"))
    with pytest.raises(ModelHTTPError) as info:
        await post(f"{server.url}/v1/chat/completions")
    assert (info.value.kind, info.value.retry_after) == ("rate_limit", 7.0)


async def test_a_success_answer_is_the_decoded_json(server: ModelServer) -> None:
    answer = await post(f"{server.url}/v1/chat/completions")
    assert answer["choices"][0]["message"]["content"] == "ok"
    assert server.requests[0].body == {"model": "m"}


@pytest.fixture
def proxy_env(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Set proxy variables for one test; the transport's per-host proxy choice is forgotten around it."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
                 "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    _proxy.cache_clear()

    def set_env(**names: str) -> None:
        for name, value in names.items():
            monkeypatch.setenv(name, value)
        _proxy.cache_clear()

    yield set_env
    _proxy.cache_clear()


async def _answer_as_proxy(seen: list[bytes], head: bytes, writer: asyncio.StreamWriter) -> None:
    seen.append(head.split(b"\r\n", 1)[0])
    body = b'{"proxied": true}'
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    await writer.drain()


async def test_a_proxy_from_the_environment_carries_the_request(raw_server, proxy_env, server: ModelServer) -> None:
    seen: list[bytes] = []

    async def proxy(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _answer_as_proxy(seen, head, writer)

    proxy_url = (await raw_server(proxy)).removesuffix("/v1/chat/completions")
    proxy_env(HTTP_PROXY=proxy_url)
    answer = await post(f"{server.url}/v1/chat/completions")
    assert answer == {"proxied": True}
    assert seen[0].startswith(f"POST {server.url}/v1/chat/completions ".encode())


async def test_no_proxy_sends_the_request_straight_to_the_host(raw_server, proxy_env, server: ModelServer) -> None:
    seen: list[bytes] = []

    async def proxy(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _answer_as_proxy(seen, head, writer)

    proxy_env(HTTP_PROXY=(await raw_server(proxy)).removesuffix("/v1/chat/completions"), NO_PROXY="127.0.0.1")
    answer = await post(f"{server.url}/v1/chat/completions")
    assert answer["choices"][0]["message"]["content"] == "ok"
    assert seen == []
