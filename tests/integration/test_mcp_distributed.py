"""MCP across workers: a delegated child on a ``shelly worker`` calls a configured MCP server's tool.

Each worker opens the config's ``mcp_servers`` in its own long-lived event loop at start-up
(``Engine.open`` inside the worker's loop), so the child's tool call goes through that worker's
session. The server is the repo's test toolbox (``tests/unit/tools/mcp/toolbox_server.py``) over
stdio; its ``add`` and ``pid`` tools give answers only the server process can produce.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from .cluster import Cluster, complete, delegate, scripted

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER_SCRIPT = REPO_ROOT / "tests" / "unit" / "tools" / "mcp" / "toolbox_server.py"


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": tool, "arguments": arguments}]}


def write_team(cluster: Cluster, child_script: list[Any], *tasks: tuple[str, str]) -> None:
    """An orchestrator delegating ``tasks`` to ``adder``, whose toolbox is the MCP server."""
    cluster.write_config(
        [scripted(orchestrator=[delegate(*tasks), "all added"], adder=child_script)],
        [{"name": "orchestrator", "description": "delegates", "options": {"max_delegation_depth": 1}},
         {"name": "adder", "description": "adds with the MCP server", "toolboxes": ["testbox"]}],
        mcp_servers=[{"name": "testbox", "command": sys.executable, "args": [str(SERVER_SCRIPT)],
                      "env": {"PYTHONPATH": str(REPO_ROOT)}}],
    )


def run_team(cluster: Cluster) -> tuple[str, list[dict[str, Any]]]:
    """``shelly run`` as the coordinator; the session id and its events."""
    out = cluster.shelly("run", "add things", "--json")
    assert out.returncode == 0, f"stdout:{out.stdout}\nstderr:{out.stderr}\n{cluster.worker_log()}"
    result = json.loads(out.stdout)
    assert result["reply"] == "all added"
    return result["session"], cluster.events(result["session"])


def of_adder(event: dict[str, Any]) -> bool:
    """An event of an ``adder`` instance (instances are named ``adder-<task words>-<n>``)."""
    return str(event["agent"]).startswith("adder")


def tool_results(events: list[dict[str, Any]]) -> list[str]:
    """The texts of the adders' tool-role messages, in stream order."""
    return [e["data"]["text"] for e in events
            if of_adder(e) and e["kind"] == "message_added" and e["data"].get("role") == "tool"]


def adder_workers(events: list[dict[str, Any]]) -> set[str]:
    return {e["data"]["worker"] for e in events if of_adder(e) and e["kind"] == "run_started"}


def test_delegated_child_on_a_worker_gets_the_mcp_servers_answer(cluster: Cluster) -> None:
    write_team(cluster, [call("add", a=20, b=22), complete("added")], ("adder", "add 20 and 22"))
    hosts = {cluster.start_worker("w1"), cluster.start_worker("w2")}
    _, events = run_team(cluster)
    assert tool_results(events)[:1] == ["42"]
    assert adder_workers(events) and adder_workers(events) <= hosts


def test_mcp_server_error_reaches_the_child_as_an_error_result(cluster: Cluster) -> None:
    write_team(cluster, [call("fail"), complete("reported")], ("adder", "try the failing tool"))
    cluster.start_worker("w1")
    _, events = run_team(cluster)
    assert tool_results(events)[:1] == ["mcpclient: tool error: tool failed"]


def test_each_worker_calls_its_own_server_process(cluster: Cluster) -> None:
    """Two children; whichever workers take them, a worker's children share its one server process
    and different workers answer from different processes (one MCP session per worker loop)."""
    write_team(cluster, [{**call("pid"), "delay": 0.3}, complete("pid read")], ("adder", "one"), ("adder", "two"))
    cluster.start_worker("w1", concurrency=1)
    cluster.start_worker("w2", concurrency=1)
    _, events = run_team(cluster)
    pids = [int(t) for t in tool_results(events) if t.isdigit()]
    assert len(pids) == 2
    assert len(set(pids)) == len(adder_workers(events))


def test_worker_whose_mcp_server_cannot_start_fails_at_start_up_naming_it(cluster: Cluster) -> None:
    cluster.write_config(
        [scripted(solo=["unused"])],
        [{"name": "solo", "toolboxes": ["broken"]}],
        mcp_servers=[{"name": "broken", "command": str(cluster.root / "no-such-server")}],
    )
    out = cluster.shelly("worker", "--hostname", f"broken@{cluster.id}", timeout=60)
    assert out.returncode == 1
    assert 'mcp server "broken": failed to start' in out.stderr


async def test_served_agent_tool_runs_its_team_on_the_workers(cluster: Cluster) -> None:
    """``shelly mcp serve --agents`` on a distributed config: the orchestrator's delegated child
    runs on a worker and uses the MCP server there; the MCP caller gets the orchestrator's answer."""
    write_team(cluster, [call("add", a=1, b=2), complete("added")], ("adder", "add 1 and 2"))
    host = cluster.start_worker("w1")
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "shelly_dist.cli.main", "mcp", "serve", "--agents"],
        env=cluster.env(), cwd=cluster.root,
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("agent_orchestrator", {"task": "add things"})
    assert not result.is_error, result.content
    assert [c.text for c in result.content if isinstance(c, types.TextContent)] == ["all added"]
    (session_id,) = await asyncio.to_thread(cluster.session_ids)
    events = await asyncio.to_thread(cluster.events, session_id)
    assert tool_results(events)[:1] == ["3"]
    assert adder_workers(events) == {host}


def test_the_coordinator_starts_only_the_mcp_servers_its_root_agent_uses(cluster: Cluster) -> None:
    started_by = cluster.root / "started-by"
    cluster.write_config(
        [scripted(orchestrator=[delegate(("adder", "add 20 and 22")), "all added"],
                  adder=[call("add", a=20, b=22), complete("added")])],
        [{"name": "orchestrator", "description": "delegates", "options": {"max_delegation_depth": 1}},
         {"name": "adder", "description": "adds with the MCP server", "toolboxes": ["testbox"]}],
        mcp_servers=[{"name": "testbox", "command": sys.executable, "args": [str(SERVER_SCRIPT)],
                      "env": {"PYTHONPATH": str(REPO_ROOT), "TOOLBOX_STARTED_BY": str(started_by)}}],
    )
    cluster.start_worker("w1")
    worker_started = started_by.read_text().split()  # a worker starts every server its agents may use
    coordinator = cluster.popen("run", "add things", "--json")
    stdout, stderr = coordinator.communicate(timeout=120)
    assert coordinator.returncode == 0, f"{stderr}\n{cluster.worker_log()}"
    assert json.loads(stdout)["reply"] == "all added"
    assert tool_results(cluster.events(json.loads(stdout)["session"]))[:1] == ["42"]
    assert len(worker_started) == 1
    assert str(coordinator.pid) not in started_by.read_text().split(), "the orchestrator uses no MCP server"


def test_a_root_agent_on_the_coordinator_still_gets_its_own_mcp_server(cluster: Cluster) -> None:
    cluster.write_config(
        [scripted(orchestrator=[call("add", a=1, b=2), "root added {result}"])],
        [{"name": "orchestrator", "description": "adds itself", "toolboxes": ["testbox"]}],
        mcp_servers=[{"name": "testbox", "command": sys.executable, "args": [str(SERVER_SCRIPT)],
                      "env": {"PYTHONPATH": str(REPO_ROOT)}}],
    )
    cluster.start_worker("w1")
    out = cluster.shelly("run", "add", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["reply"] == "root added 3"


def test_a_resumed_session_starts_the_mcp_servers_of_its_own_agent_only(cluster: Cluster) -> None:
    started_by = cluster.root / "started-by"
    cluster.write_config(
        [scripted(orchestrator=["hello", "hello again"],
                  adder=[call("add", a=1, b=2), "added {result}", call("add", a=2, b=3), "added {result} too"])],
        [{"name": "orchestrator", "description": "talks"},
         {"name": "adder", "description": "adds with the MCP server", "toolboxes": ["testbox"]}],
        mcp_servers=[{"name": "testbox", "command": sys.executable, "args": [str(SERVER_SCRIPT)],
                      "env": {"PYTHONPATH": str(REPO_ROOT), "TOOLBOX_STARTED_BY": str(started_by)}}],
    )
    cluster.start_worker("w1")
    talk = json.loads(cluster.shelly("run", "hi", "--json").stdout)
    add = json.loads(cluster.shelly("run", "--agent", "adder", "add", "--json").stdout)
    before = started_by.read_text().split()
    resumed_talk = cluster.popen("run", "--session", talk["session"], "hi again", "--json")
    stdout, stderr = resumed_talk.communicate(timeout=120)
    assert resumed_talk.returncode == 0 and json.loads(stdout)["reply"] == "hello again", stderr
    assert str(resumed_talk.pid) not in started_by.read_text().split(), "the orchestrator uses no MCP server"
    resumed_add = cluster.popen("run", "--session", add["session"], "add more", "--json")  # no --agent: the entry's
    stdout, stderr = resumed_add.communicate(timeout=120)
    assert resumed_add.returncode == 0, stderr
    assert json.loads(stdout)["reply"] == "added 5 too"
    assert str(resumed_add.pid) in started_by.read_text().split()[len(before):]
