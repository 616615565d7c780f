"""An MCP server's tools are gated like any other (issue 35): ``approval: {tools: [toolbox:<server>]}``
makes a call of the real ``mcp-server-time`` wait for ``Session.reject``/``approve``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from shelly_dist.engine import Engine
from shelly_dist.engine.config import config_from_data

from .test_mcp_servers import console_script

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def config() -> dict[str, Any]:
    ask = {"tool_calls": [{"name": "get_current_time", "arguments": {"timezone": "UTC"}}]}
    return {
        "providers": [{"name": "p", "kind": "scripted", "model": "m", "script": {"clock": [ask, "said: {result}"]}}],
        "mcp_servers": [{"name": "time", "command": console_script("mcp-server-time")}],
        "agents": [{"name": "clock", "toolboxes": ["time"], "approval": {"tools": ["toolbox:time"]}}],
    }


@pytest.mark.parametrize("approve", [True, False])
async def test_a_call_of_an_mcp_servers_tool_waits_for_its_verdict(tmp_path: Path, approve: bool) -> None:
    async with await Engine.open(config_from_data(config(), {}), shelly_dir=tmp_path / ".shelly") as engine:
        session = engine.session(persist=False)
        sending = asyncio.create_task(session.send("what time is it?"))
        deadline = asyncio.get_running_loop().time() + 60
        while not (found := await session.decisions()):
            assert asyncio.get_running_loop().time() < deadline and not sending.done()
            await asyncio.sleep(0.02)  # polling the open decisions: the condition, with a deadline
        assert (found[0]["tool"], found[0]["arguments"]) == ("get_current_time", {"timezone": "UTC"})
        if approve:
            await session.approve(found[0]["id"])
        else:
            await session.reject(found[0]["id"], reason="no clocks")
        reply = (await sending).reply.text_content()
    if approve:
        assert '"timezone": "UTC"' in reply or "UTC" in reply
    else:
        assert reply == "said: get_current_time: rejected: no clocks"
