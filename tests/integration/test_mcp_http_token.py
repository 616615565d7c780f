"""``shelly mcp serve --transport http`` off loopback: a bearer token is required at start and
checked on every request (real HTTP requests against the real subprocess)."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from .test_mcp_serve import SHELLY, URL_LINE, env, write_config

pytestmark = pytest.mark.integration

TOKEN = "t0ken-for-tests"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}


@contextmanager
def serving(root: Path, *args: str, token: str | None = TOKEN) -> Iterator[str]:
    """``shelly mcp serve --transport http --host 0.0.0.0 --port 0 ARGS``; yields a loopback URL."""
    proc_env = env() | ({"SHELLY_MCP_TOKEN": token} if token else {})
    proc = subprocess.Popen(
        [*SHELLY, "mcp", "serve", "--transport", "http", "--host", "0.0.0.0", "--port", "0", *args],
        cwd=root, env=proc_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:  # ends at EOF if the server dies
            seen.append(line)
            if found := URL_LINE.search(line):
                break
        else:
            raise AssertionError(f"no URL on stderr: {''.join(seen)}")
        yield found.group(1).replace("0.0.0.0", "127.0.0.1")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


def post(url: str, body: dict[str, object], headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "content-type": "application/json", "accept": "application/json, text/event-stream", **headers})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write_config(tmp_path)
    return tmp_path


def test_a_non_loopback_host_without_a_token_refuses_to_start(project: Path) -> None:
    out = subprocess.run([*SHELLY, "mcp", "serve", "--transport", "http", "--host", "0.0.0.0", "--port", "0"],
                         cwd=project, env=env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "shelly: mcp serve: --host 0.0.0.0 is reachable from other machines: set SHELLY_MCP_TOKEN "
        "(or --token) so every request must carry Authorization: Bearer <token>"]


@pytest.mark.parametrize("headers", [{}, {"authorization": "Bearer wrong"}, {"authorization": TOKEN}],
                         ids=["no-token", "wrong-token", "no-scheme"])
def test_a_request_without_the_token_is_refused_with_401(project: Path, headers: dict[str, str]) -> None:
    with serving(project) as url:
        status, response_headers, _ = post(url, INITIALIZE, headers)
    assert status == 401
    assert response_headers.get("www-authenticate", "").startswith("Bearer")


def test_the_token_is_checked_on_every_request_not_only_the_first(project: Path) -> None:
    with serving(project) as url:
        status, headers, _ = post(url, INITIALIZE, {"authorization": f"Bearer {TOKEN}"})
        assert status == 200
        session = {"mcp-session-id": headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        later, _, _ = post(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session)
    assert later == 401


async def test_a_client_with_the_token_lists_and_calls_tools(project: Path) -> None:
    with serving(project) as url:
        client = httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"})
        async with client, streamable_http_client(url, http_client=client) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            names = {t.name for t in (await session.list_tools()).tools}
            stored = await session.call_tool("shared_state_set", {"key": "k", "value": 1})
    assert "shared_state_get" in names and not stored.is_error
