"""``a2a_agents:``: a local agent on the pool lists and delegates to a remote A2A agent served by
another project's ``shelly a2a serve``, and cancelling our tree cancels the remote task."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import ListTasksRequest, TaskState

from tests.conftest import free_port

from .cluster import Cluster, delegate, scripted, wait_until
from .ops import SHELLY, Processes, run_json, wait_for_http

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TOKEN = "remote-t0ken"
LIST_AGENTS = {"tool_calls": [{"name": "list_agents", "arguments": {}}]}


def serve_remote(procs: Processes, root: Path, *, delay: float = 0.0) -> str:
    """Another project (embedded, no broker) whose ``analyst`` is served over A2A with a token."""
    reply: Any = {"text": "analyst checked: {task}", "delay": delay} if delay else "analyst checked: {task}"
    (root / ".shelly").mkdir(parents=True)
    (root / ".shelly" / "config.yaml").write_text(yaml.safe_dump({
        "providers": [{"name": "p", "kind": "scripted", "model": "m", "script": {"analyst": [reply]}}],
        "agents": [{"name": "analyst", "description": "Checks numbers against the ledger."}],
    }))
    port = free_port()
    proc = procs.start("remote", [*SHELLY, "a2a", "serve", "--port", str(port), "--shelly-dir", str(root / ".shelly")],
                       env={"SHELLY_A2A_TOKEN": TOKEN})
    url = f"http://127.0.0.1:{port}/"
    wait_for_http(f"{url}.well-known/agent-card.json", proc, f"remote a2a serve\n{procs.log('remote')}")
    return url


def local_team(cluster: Cluster, remote: str, *lead_script: Any) -> None:
    cluster.write_config(
        [scripted(lead=list(lead_script))],
        [{"name": "lead", "description": "leads", "options": {"max_delegation_depth": 1}}],
        a2a_agents=[{"name": "checker", "url": remote, "token": TOKEN}],
        distributed={"step_time_limit": 60, "visibility_timeout": 90},
    )


def test_a_local_agent_lists_and_delegates_to_a_remote_a2a_agent(cluster: Cluster, procs: Processes,
                                                                 tmp_path: Path):
    remote = serve_remote(procs, tmp_path / "remote")
    local_team(cluster, remote, LIST_AGENTS, delegate(("checker", "check the Q3 numbers")), "lead done")
    cluster.start_worker("w1")
    out = run_json(cluster, "audit")
    events = cluster.events(out["session"])
    listed = next(e["data"]["text"] for e in events if e["kind"] == "message_added" and e["data"].get("role") == "tool")
    assert '"name": "checker"' in listed or '"name":"checker"' in listed
    assert "Checks numbers against the ledger." in listed, "the remote card's description"
    finished = next(e for e in events if e["kind"] == "run_finished" and e["agent"].startswith("checker"))
    assert finished["data"]["status"] == "done"
    assert "analyst checked: " in str(finished["data"]["entry"])
    assert "check the Q3 numbers" in str(finished["data"]["entry"]), "the remote got the delegated task"
    assert finished["data"]["worker"].startswith("w1@"), "the child ran on the pool"


def remote_tasks(url: str) -> list[Any]:
    async def main() -> list[Any]:
        async with httpx.AsyncClient(timeout=30, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            client = await create_client(url, ClientConfig(httpx_client=http))
            return list((await client.list_tasks(ListTasksRequest())).tasks)

    return asyncio.run(main())


def test_cancelling_our_tree_cancels_the_remote_task(cluster: Cluster, procs: Processes, tmp_path: Path):
    remote = serve_remote(procs, tmp_path / "remote", delay=60)
    local_team(cluster, remote, delegate(("checker", "check the Q3 numbers")), "lead done")
    cluster.start_worker("w1")
    run = cluster.popen("run", "audit", "--json")
    try:
        working = wait_until(
            lambda: [t for t in remote_tasks(remote) if t.status.state == TaskState.TASK_STATE_WORKING],
            60, f"the remote task to be working\n{cluster.worker_log()}")
        session = cluster.session_ids()[0]
        assert cluster.shelly("cancel", "--session", session).returncode == 0
        wait_until(lambda: all(t.status.state == TaskState.TASK_STATE_CANCELED for t in remote_tasks(remote)
                               if t.id == working[0].id), 30,
                   f"the remote task to be canceled\n{cluster.worker_log()}\n{procs.log('remote')}")
    finally:
        run.kill()
        run.communicate(timeout=30)
    assert isinstance(run.returncode, int)


def test_a_remote_agent_named_like_a_local_one_is_a_config_error(cluster: Cluster):
    cluster.write_config([scripted(lead=["hi"])], [{"name": "lead"}],
                         a2a_agents=[{"name": "lead", "url": "http://127.0.0.1:1/"}])
    out = cluster.shelly("agents")
    assert out.returncode == 2
    assert 'config: a2a_agents[0].name: "lead" is also a local agent' in out.stderr

