"""The MCP client against our test server as a real subprocess, and over HTTP (behaviour 81)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Callable

import mcp_types as types
import pytest
from pydantic import ValidationError

from shelly_dist.errors import MCPError, ToolError, UsageError
from shelly_dist.tools.mcp import MCPClient, MCPServerSpec, connect_all, result_text
from tests.conftest import free_port

from .conftest import stdio_spec

pytestmark = pytest.mark.filterwarnings("error")


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10.0
    while not condition():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        await asyncio.sleep(0.01)


async def test_toolbox_is_named_after_the_server_and_keeps_names_and_descriptions() -> None:
    async with MCPClient(stdio_spec("calc")) as client:
        box = await client.toolbox()
    assert box.name == "calc"
    assert box.names() == ["echo", "add", "fail", "pid"]
    assert box.get("add").description == "Add two integers."
    assert box.get("add").input_schema["required"] == ["a", "b"]


async def test_toolbox_tools_are_in_the_server_policy_group() -> None:
    async with MCPClient(stdio_spec("calc")) as client:
        box = await client.toolbox()
    assert {t.group for t in box} == {"mcp:calc"}


async def test_tools_are_retry_safe_only_when_the_server_is_marked_retry_on_crash() -> None:
    async with MCPClient(stdio_spec("calc")) as client:
        unmarked = await client.toolbox()
    async with MCPClient(stdio_spec("calc").model_copy(update={"retry_on_crash": True})) as client:
        marked = await client.toolbox()
    assert {t.retry_on_crash for t in unmarked} == {False}
    assert {t.retry_on_crash for t in marked} == {True}


async def test_tool_handler_echoes_json_arguments() -> None:
    async with MCPClient(stdio_spec()) as client:
        echo = (await client.toolbox()).get("echo")
        out = await echo.handler('{"x": [1, 2], "y": "z"}')
    assert json.loads(out) == {"x": [1, 2], "y": "z"}


async def test_error_result_raises_shelly_tool_error_text() -> None:
    async with MCPClient(stdio_spec()) as client:
        fail = (await client.toolbox()).get("fail")
        with pytest.raises(ToolError) as caught:
            await fail.handler("{}")
    assert str(caught.value) == "mcpclient: tool error: tool failed"
    assert caught.value.tool == "fail"


async def test_unknown_tool_raises_an_error_naming_server_and_tool() -> None:
    async with MCPClient(stdio_spec("calc")) as client:
        with pytest.raises(MCPError, match=r'^mcp server "calc": nope: tool not found: nope$') as caught:
            await client.call_tool("nope")
    assert caught.value.server == "calc"


async def test_non_object_arguments_are_an_invalid_input_error() -> None:
    async with MCPClient(stdio_spec()) as client:
        echo = (await client.toolbox()).get("echo")
        with pytest.raises(ToolError, match=r"^echo: invalid input: arguments must be a JSON object$"):
            await echo.handler("[1]")


async def test_concurrent_calls_from_many_tasks_all_get_their_own_answer() -> None:
    async with MCPClient(stdio_spec()) as client:
        answers = await asyncio.gather(*(client.call_tool("add", {"a": i, "b": 1}) for i in range(20)))
    assert answers == [str(i + 1) for i in range(20)]


async def test_killed_server_is_restarted_and_the_call_retried() -> None:
    async with MCPClient(stdio_spec()) as client:
        first_pid = int(await client.call_tool("pid"))
        os.kill(first_pid, signal.SIGKILL)
        await wait_until(lambda: process_gone(first_pid))
        second_pid = int(await client.call_tool("pid"))
        assert second_pid != first_pid
        assert client.restarts == 1


async def test_aclose_stops_the_server_process_and_is_idempotent() -> None:
    client = MCPClient(stdio_spec())
    await client.start()
    pid = int(await client.call_tool("pid"))
    await client.aclose()
    await client.aclose()
    assert process_gone(pid)


async def test_call_after_aclose_raises_closed_error() -> None:
    client = MCPClient(stdio_spec("calc"))
    await client.start()
    await client.aclose()
    with pytest.raises(MCPError, match=r'^mcp server "calc": client is closed$'):
        await client.call_tool("pid")


async def test_server_that_fails_to_start_is_an_error_naming_it() -> None:
    spec = MCPServerSpec(name="time", command="/nonexistent/mcp-server")
    with pytest.raises(MCPError, match=r'^mcp server "time": failed to start: FileNotFoundError') as caught:
        await MCPClient(spec).start()
    assert caught.value.server == "time"


async def test_server_that_exits_before_the_handshake_fails_to_start() -> None:
    spec = MCPServerSpec(name="quitter", command="true")
    with pytest.raises(MCPError, match=r'^mcp server "quitter": failed to start: '):
        await MCPClient(spec).start()


async def test_unreachable_url_fails_to_start() -> None:
    spec = MCPServerSpec(name="remote", url=f"http://127.0.0.1:{free_port()}/mcp")
    with pytest.raises(MCPError, match=r'^mcp server "remote": failed to start: '):
        await MCPClient(spec, startup_timeout=10).start()


async def test_server_silent_past_the_startup_timeout_fails_to_start() -> None:
    silent = MCPServerSpec(name="mute", command=sys.executable, args=["-c", "import sys; sys.stdin.read()"])
    with pytest.raises(MCPError, match=r'^mcp server "mute": failed to start: no answer within 0.5s$'):
        await MCPClient(silent, startup_timeout=0.5).start()


async def test_url_server_receives_the_configured_headers() -> None:
    seen: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    async def record_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if not seen.done():
            seen.set_result(head.lower())
        writer.close()

    listener = await asyncio.start_server(record_head, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    spec = MCPServerSpec(name="web", url=f"http://127.0.0.1:{port}/mcp", headers={"X-Api-Key": "k123"})
    try:
        with pytest.raises(MCPError, match="failed to start"):
            await MCPClient(spec, startup_timeout=10).start()
    finally:
        listener.close()
        await listener.wait_closed()
    assert b"x-api-key: k123" in await seen


async def test_client_over_streamable_http_lists_and_calls_tools(http_url: str) -> None:
    spec = MCPServerSpec(name="web", url=http_url, headers={"X-Test": "1"})
    async with MCPClient(spec) as client:
        box = await client.toolbox()
        out = await box.get("add").handler('{"a": 40, "b": 2}')
    assert box.name == "web"
    assert out == "42"


async def test_connect_all_opens_every_server() -> None:
    clients = await connect_all([stdio_spec("one"), stdio_spec("two")])
    try:
        assert [c.name for c in clients] == ["one", "two"]
        assert [await c.call_tool("add", {"a": 1, "b": 1}) for c in clients] == ["2", "2"]
    finally:
        for c in clients:
            await c.aclose()


async def test_connect_all_closes_the_others_when_one_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[MCPClient] = []
    real_start = MCPClient.start

    async def recording_start(self: MCPClient) -> None:
        started.append(self)
        await real_start(self)

    monkeypatch.setattr(MCPClient, "start", recording_start)
    bad = MCPServerSpec(name="broken", command="/nonexistent/mcp-server")
    with pytest.raises(MCPError, match=r'^mcp server "broken": failed to start'):
        await connect_all([stdio_spec("good"), bad])
    good = next(c for c in started if c.name == "good")
    with pytest.raises(MCPError, match="client is closed"):
        await good.call_tool("pid")


async def test_connect_all_rejects_duplicate_names() -> None:
    with pytest.raises(UsageError, match="duplicate server names: a"):
        await connect_all([stdio_spec("a"), stdio_spec("a")])


async def test_client_refuses_use_from_another_event_loop() -> None:
    async with MCPClient(stdio_spec("calc")) as client:
        with pytest.raises(UsageError, match="another event loop"):
            await asyncio.to_thread(asyncio.run, client.call_tool("pid"))


def test_result_text_joins_text_contents_with_newlines() -> None:
    result = types.CallToolResult(
        content=[types.TextContent(type="text", text="line 1"), types.TextContent(type="text", text="line 2")]
    )
    assert result_text(result) == "line 1\nline 2"


def test_result_text_falls_back_to_structured_content() -> None:
    result = types.CallToolResult(content=[], structured_content={"ok": True})
    assert json.loads(result_text(result)) == {"ok": True}


@pytest.mark.parametrize("fields", [{}, {"command": "x", "url": "http://h/mcp"}])
def test_spec_needs_exactly_one_of_command_and_url(fields: dict[str, str]) -> None:
    with pytest.raises(ValidationError, match='mcp server "s": exactly one of command or url is required'):
        MCPServerSpec(name="s", **fields)
