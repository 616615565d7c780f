"""``shelly mcp serve`` as a real subprocess, driven by the official MCP SDK client.

Over stdio the SDK's ``stdio_client`` starts the command itself; over HTTP the server is started
with ``--port 0`` and the URL it prints on stderr is read back. The config uses the scripted
provider, so ``agent_<name>`` tools answer deterministically.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import yaml
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
SHELLY = [sys.executable, "-m", "shelly_dist.cli.main"]
URL_LINE = re.compile(r"serving MCP on (http://\S+)")


def write_config(root: Path, **extra: Any) -> None:
    config = {
        "providers": [{"name": "p", "kind": "scripted", "model": "m", "script": {"*": ["helper says: {task}"]}}],
        "agents": [{"name": "helper", "description": "answers", "toolboxes": ["state", "tasks"]}],
        **extra,
    }
    (root / ".shelly").mkdir(parents=True, exist_ok=True)
    (root / ".shelly" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def env() -> dict[str, str]:
    return {"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write_config(tmp_path)
    return tmp_path


@asynccontextmanager
async def stdio_session(root: Path, *args: str) -> AsyncIterator[ClientSession]:
    """The official client on ``shelly mcp serve ARGS`` started over stdio in ``root``."""
    params = StdioServerParameters(command=SHELLY[0], args=[*SHELLY[1:], "mcp", "serve", *args], env=env(), cwd=root)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


@pytest.fixture
def http_server(project: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``shelly mcp serve --transport http --port 0 --agents``, its URL read from stderr; reaped."""
    proc = subprocess.Popen(
        [*SHELLY, "mcp", "serve", "--transport", "http", "--port", "0", "--agents"],
        cwd=project, env=env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:  # ends at EOF if the server dies, so this cannot hang forever
            lines.append(line)
            if found := URL_LINE.search(line):
                break
        else:
            raise AssertionError(f"no URL on stderr: {''.join(lines)}")
        yield proc, found.group(1)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


async def test_stdio_lists_every_agent_toolbox_and_an_agent_tool(project: Path) -> None:
    async with stdio_session(project, "--agents") as session:
        names = {t.name for t in (await session.list_tools()).tools}
    assert {"shared_state_get", "shared_state_set", "shared_tasks_create", "agent_helper"} <= names


async def test_stdio_without_agents_serves_no_agent_tool(project: Path) -> None:
    async with stdio_session(project) as session:
        names = {t.name for t in (await session.list_tools()).tools}
    assert "shared_state_get" in names and not any(n.startswith("agent_") for n in names)


async def test_stdio_toolbox_option_serves_only_that_toolbox(project: Path) -> None:
    async with stdio_session(project, "--toolbox", "tasks") as session:
        names = {t.name for t in (await session.list_tools()).tools}
    assert "shared_tasks_create" in names and "shared_state_get" not in names


async def test_stdio_state_set_then_get_returns_the_value(project: Path) -> None:
    async with stdio_session(project) as session:
        stored = await session.call_tool("shared_state_set", {"key": "plan", "value": "ship it"})
        got = await session.call_tool("shared_state_get", {"key": "plan"})
    assert not stored.is_error and not got.is_error
    assert "ship it" in text(got)


async def test_stdio_get_of_a_missing_key_is_an_error_result(project: Path) -> None:
    async with stdio_session(project) as session:
        result = await session.call_tool("shared_state_get", {"key": "nope"})
    assert result.is_error
    assert "key not found" in text(result)


async def test_stdio_agent_tool_runs_the_agent_and_returns_its_reply(project: Path) -> None:
    async with stdio_session(project, "--agents") as session:
        result = await session.call_tool("agent_helper", {"task": "summarise the plan"})
    assert not result.is_error, text(result)
    assert text(result) == "helper says: summarise the plan"


async def test_agent_tool_without_a_task_is_an_error_result(project: Path) -> None:
    async with stdio_session(project, "--agents") as session:
        result = await session.call_tool("agent_helper", {})
    assert result.is_error
    assert "agent_helper: invalid input" in text(result)


async def test_http_transport_serves_tools_and_agents(http_server: tuple[subprocess.Popen[str], str]) -> None:
    _, url = http_server
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        names = {t.name for t in (await session.list_tools()).tools}
        await session.call_tool("shared_state_set", {"key": "k", "value": 7})
        got = await session.call_tool("shared_state_get", {"key": "k"})
        answer = await session.call_tool("agent_helper", {"task": "hi", "context": "a greeting"})
    assert {"shared_state_get", "agent_helper"} <= names
    assert "7" in text(got)
    assert text(answer) == "helper says: <context>\na greeting\n</context>\n\nhi"


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_http_server_stops_cleanly_on_a_signal(
    http_server: tuple[subprocess.Popen[str], str], sig: signal.Signals, code: int
) -> None:
    proc, _ = http_server
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code
    assert "Traceback" not in err


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_stdio_server_stops_cleanly_on_a_signal_while_stdin_stays_open(
    project: Path, sig: signal.Signals, code: int
) -> None:
    proc = subprocess.Popen(
        [*SHELLY, "mcp", "serve"], cwd=project, env=env(),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline().startswith("session ")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert proc.returncode == code
    assert "Traceback" not in err


def test_unknown_toolbox_exits_2_naming_it(project: Path) -> None:
    out = subprocess.run(
        [*SHELLY, "mcp", "serve", "--toolbox", "nosuch"], cwd=project, env=env(),
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 2
    assert 'unknown toolbox "nosuch"' in out.stderr


async def test_state_written_over_mcp_is_the_sessions_blackboard_on_redis(
    tmp_path: Path, redis_url: str, key_prefix: str
) -> None:
    write_config(tmp_path, distributed={"redis_url": redis_url, "key_prefix": key_prefix})
    session_id = "0123456789abcdef"
    async with stdio_session(tmp_path, "--session", session_id) as session:
        result = await session.call_tool("shared_state_set", {"key": "answer", "value": 42})
    assert not result.is_error, text(result)
    out = await asyncio.to_thread(
        subprocess.run,
        [*SHELLY, "state", "get", "answer", "--session", session_id],
        cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["value"] == 42
