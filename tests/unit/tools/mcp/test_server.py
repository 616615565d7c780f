"""The MCP server over our toolboxes, driven by the official SDK client (behaviour 82)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import mcp_types as types
import pytest
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError as SDKMCPError

from shelly_dist.tools import Tool, ToolBox
from shelly_dist.tools.mcp import build_server, serve_http

from .conftest import REPO_ROOT, SERVER_SCRIPT
from .toolbox_server import test_toolbox

pytestmark = pytest.mark.filterwarnings("error")


@asynccontextmanager
async def stdio_session() -> AsyncIterator[ClientSession]:
    """The official client talking to ``toolbox_server.py`` run as a subprocess."""
    params = StdioServerParameters(
        command=sys.executable, args=[str(SERVER_SCRIPT)], env={"PYTHONPATH": str(REPO_ROOT)}
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def only_text(result: types.CallToolResult) -> str:
    assert len(result.content) == 1
    content = result.content[0]
    assert isinstance(content, types.TextContent)
    return content.text


async def test_stdio_server_lists_every_tool_with_its_schema() -> None:
    async with stdio_session() as session:
        listed = await session.list_tools()
    by_name = {t.name: t for t in listed.tools}
    assert list(by_name) == ["echo", "add", "fail", "pid"]
    assert by_name["add"].description == "Add two integers."
    assert by_name["add"].input_schema["required"] == ["a", "b"]


async def test_stdio_server_call_returns_one_text_content() -> None:
    async with stdio_session() as session:
        result = await session.call_tool("add", {"a": 2, "b": 3})
    assert not result.is_error
    assert only_text(result) == "5"


async def test_stdio_server_handler_error_is_an_error_result_with_its_text() -> None:
    async with stdio_session() as session:
        result = await session.call_tool("fail", {})
    assert result.is_error
    assert only_text(result) == "tool failed"


async def test_invalid_input_is_an_error_result_naming_the_tool() -> None:
    async with Client(build_server([test_toolbox()])) as client:
        result = await client.call_tool("add", {"a": "x"})
    assert result.is_error
    assert only_text(result).startswith("add: invalid input:")


async def test_unknown_tool_is_a_protocol_error_naming_the_tool() -> None:
    async with Client(build_server([test_toolbox()])) as client:
        with pytest.raises(SDKMCPError, match="tool not found: nope") as caught:
            await client.call_tool("nope", {})
    assert caught.value.code == types.INVALID_PARAMS


async def test_missing_arguments_reach_the_handler_as_an_empty_object() -> None:
    async with Client(build_server([test_toolbox()])) as client:
        result = await client.call_tool("echo")
    assert json.loads(only_text(result)) == {}


async def test_later_toolbox_replaces_a_tool_of_the_same_name() -> None:
    async def handler(arguments: str) -> str:
        return "replaced"

    second = ToolBox([Tool("echo", "replaced", {"type": "object"}, handler)])
    async with Client(build_server([test_toolbox(), second])) as client:
        listed = await client.list_tools()
    assert [t.description for t in listed.tools if t.name == "echo"] == ["replaced"]


async def test_streamable_http_server_lists_and_calls_tools(http_url: str) -> None:
    async with streamable_http_client(http_url) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = await session.list_tools()
        result = await session.call_tool("add", {"a": 20, "b": 22})
    assert [t.name for t in listed.tools] == ["echo", "add", "fail", "pid"]
    assert only_text(result) == "42"


async def test_streamable_http_server_reports_handler_errors_as_results(http_url: str) -> None:
    async with Client(http_url) as client:
        result = await client.call_tool("fail", {})
    assert result.is_error
    assert only_text(result) == "tool failed"


async def test_serve_http_raises_cancellation_when_cancelled() -> None:
    listening: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve_http(build_server([test_toolbox()]), port=0, on_listening=listening.set_result)
    )
    await asyncio.wait_for(asyncio.shield(listening), timeout=10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
