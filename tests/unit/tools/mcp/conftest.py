"""Fixtures for the MCP tests: the test toolbox served over stdio (a subprocess) or HTTP (in-process)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from shelly_dist.tools.mcp import MCPServerSpec, build_server, serve_http

from .toolbox_server import test_toolbox

SERVER_SCRIPT = Path(__file__).with_name("toolbox_server.py")
REPO_ROOT = Path(__file__).resolve().parents[4]


def stdio_spec(name: str = "testbox") -> MCPServerSpec:
    """A spec that runs ``toolbox_server.py`` as a stdio MCP server."""
    return MCPServerSpec(
        name=name,
        command=sys.executable,
        args=[str(SERVER_SCRIPT)],
        env={"PYTHONPATH": str(REPO_ROOT)},
    )


@pytest.fixture
async def http_url() -> AsyncIterator[str]:
    """The test toolbox served over streamable HTTP on a free loopback port; stopped afterwards."""
    listening: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve_http(
            build_server([test_toolbox()], name="shelly-test"),
            host="127.0.0.1",
            port=0,
            on_listening=listening.set_result,
        )
    )
    try:
        port = await asyncio.wait_for(asyncio.shield(listening), timeout=10)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
