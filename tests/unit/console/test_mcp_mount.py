"""``shelly serve --mcp``: the tools of ``shelly mcp serve --agents`` under ``/mcp`` of the
console's port, behind the console's gate (a real MCP client over streamable HTTP)."""

from __future__ import annotations

from pathlib import Path

import httpx2
from aiohttp.test_utils import TestServer
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from shelly_dist.console import Gate, build_app
from shelly_dist.console.local import LocalBackend
from shelly_dist.console.mcp import mount_mcp
from shelly_dist.engine import Engine
from tests.unit.console.conftest import team_config

TOKEN = "t0ken"


async def test_an_mcp_client_with_the_token_lists_the_agents_and_runs_one(tmp_path: Path) -> None:
    async with await Engine.open(team_config(), shelly_dir=tmp_path / ".shelly") as engine:
        backend = LocalBackend(engine)
        app = build_app(backend, Gate(token=TOKEN))
        assert mount_mcp(app, engine, "0123456789abcdef") >= 2
        server = TestServer(app)
        await server.start_server()
        url = f"http://127.0.0.1:{server.port}/mcp"
        try:
            async with httpx2.AsyncClient() as anonymous:
                refused = await anonymous.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            assert refused.status_code == 401  # the console's gate, before the MCP app
            client = httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"})
            async with client, streamable_http_client(url, http_client=client) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                names = {t.name for t in (await session.list_tools()).tools}
                answer = await session.call_tool("agent_lead", {"task": "go"})
            assert {"agent_lead", "agent_helper"} <= names
            assert not answer.is_error and answer.content[0].text == "lead done"
        finally:
            await server.close()
            await backend.aclose()
