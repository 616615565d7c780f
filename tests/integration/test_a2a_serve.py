"""``shelly a2a serve`` on the pool, driven by the official ``a2a-sdk`` client: the Agent Card,
``message/send``, ``message/stream`` to the final artifact, ``tasks/get`` from Redis, and
``tasks/cancel`` stopping the whole tree on a real worker."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.helpers import get_artifact_text, new_text_message
from a2a.types.a2a_pb2 import CancelTaskRequest, GetTaskRequest, Role, SendMessageRequest, StreamResponse, TaskState

from shelly_dist.testing.model_server import ModelServer, Reply
from tests.conftest import free_port

from .cluster import Cluster, complete, delegate, scripted, wait_until
from .ops import SHELLY, Processes, http_get, wait_for_http

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TOKEN = "a2a-t0ken"


def team(cluster: Cluster, *, child_delay: float = 0.0) -> None:
    """``lead`` (described, with a skill) delegates to ``helper``, which completes after ``child_delay``."""
    child: dict[str, Any] = complete("helped with {task}")
    if child_delay:
        child["delay"] = child_delay
    skill = cluster.root / ".shelly" / "skills" / "triage"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: triage\ndescription: Sort incidents by urgency.\n---\nSort them.\n")
    cluster.write_config(
        [scripted(lead=[delegate(("helper", "inspect the logs")), "lead done: the logs are clean"], helper=[child])],
        [{"name": "lead", "description": "Investigates incidents with a helper.", "skills": ["triage"],
          "options": {"max_delegation_depth": 1}},
         {"name": "helper", "description": "helps"}],
        distributed={"step_time_limit": 60, "visibility_timeout": 90},
    )


def start_a2a(procs: Processes, *args: str, env: dict[str, str] | None = None, name: str = "a2a") -> str:
    """``shelly a2a serve`` on a free port; its base URL once the card answers."""
    port = free_port()
    proc = procs.start(name, [*SHELLY, "a2a", "serve", "--port", str(port), *args], env=env)
    url = f"http://127.0.0.1:{port}/"
    wait_for_http(f"{url}.well-known/agent-card.json", proc, f"a2a serve\n{procs.log(name)}")
    return url


@pytest.fixture
def served(cluster: Cluster, procs: Processes) -> str:
    team(cluster)
    cluster.start_worker("w1")
    return start_a2a(procs)


def message(text: str) -> SendMessageRequest:
    return SendMessageRequest(message=new_text_message(text, role=Role.ROLE_USER))


async def stream(url: str, text: str, *, headers: dict[str, str] | None = None) -> AsyncIterator[StreamResponse]:
    async with httpx.AsyncClient(timeout=60, headers=headers) as http:
        client = await create_client(url, ClientConfig(httpx_client=http, streaming=True))
        async for response in client.send_message(message(text)):
            yield response


def test_the_card_names_the_agent_its_description_skills_streaming_and_interface(served: str):
    async def main() -> Any:
        async with httpx.AsyncClient() as http:
            return await A2ACardResolver(http, served).get_agent_card()

    card = asyncio.run(main())
    assert card.name == "lead"
    assert card.description == "Investigates incidents with a helper."
    assert card.capabilities.streaming is True
    assert [(s.id, s.description) for s in card.skills] == [
        ("lead", "Investigates incidents with a helper."), ("skill:triage", "Sort incidents by urgency.")]
    assert card.supported_interfaces[0].url == served
    assert card.supported_interfaces[0].protocol_binding == "JSONRPC"
    assert not card.security_schemes, "no token on loopback: no scheme required"


def test_message_stream_reports_the_tree_at_work_and_ends_with_the_reply_artifact(cluster: Cluster, served: str):
    async def main() -> list[StreamResponse]:
        return [r async for r in stream(served, "investigate")]

    responses = asyncio.run(main())
    statuses = [r.status_update.status.message.parts[0].text for r in responses
                if r.HasField("status_update") and r.status_update.status.message.parts]
    assert "lead delegated to helper: inspect the logs" in statuses
    assert any(s.startswith("helper-inspect-1 started on w1@") for s in statuses), statuses
    assert "helper-inspect-1 done" in statuses
    artifacts = [r.artifact_update.artifact for r in responses if r.HasField("artifact_update")]
    assert [get_artifact_text(a) for a in artifacts] == ["lead done: the logs are clean"]
    final = responses[-1].status_update.status.state
    assert final == TaskState.TASK_STATE_COMPLETED
    task_id = responses[-1].status_update.task_id
    assert {r["agent"] for r in cluster.runs(task_id)} == {"lead", "helper"}, "the task id is the session"


def test_message_send_returns_the_completed_task_and_another_replica_reads_it_from_redis(
    cluster: Cluster, served: str, procs: Processes
):
    async def send() -> Any:
        async with httpx.AsyncClient(timeout=60) as http:
            client = await create_client(served, ClientConfig(httpx_client=http, streaming=False))
            return [r async for r in client.send_message(message("investigate"))][-1].task

    sent = asyncio.run(send())
    assert sent.status.state == TaskState.TASK_STATE_COMPLETED
    assert get_artifact_text(sent.artifacts[0]) == "lead done: the logs are clean"
    assert procs.stop("a2a") == 0  # the first server is gone: the task lives on in Redis
    replica = start_a2a(procs, name="replica")

    async def get() -> Any:
        async with httpx.AsyncClient(timeout=60) as http:
            client = await create_client(replica, ClientConfig(httpx_client=http, streaming=False))
            return await client.get_task(GetTaskRequest(id=sent.id))

    got = asyncio.run(get())
    assert got.status.state == TaskState.TASK_STATE_COMPLETED
    assert get_artifact_text(got.artifacts[0]) == "lead done: the logs are clean"


def test_tasks_cancel_stops_the_whole_tree_on_the_pool(cluster: Cluster, procs: Processes):
    team(cluster, child_delay=60)
    cluster.start_worker("w1")
    url = start_a2a(procs)

    async def main() -> tuple[str, Any]:
        async with httpx.AsyncClient(timeout=60) as http:
            client = await create_client(url, ClientConfig(httpx_client=http, streaming=True))
            async for r in client.send_message(message("investigate")):
                text = r.status_update.status.message.parts[0].text if r.HasField("status_update") and \
                    r.status_update.status.message.parts else ""
                if text.startswith("helper-inspect-1 started"):  # the child is in its 60 s step on the worker
                    task_id = r.status_update.task_id
                    break
            canceled = await client.cancel_task(CancelTaskRequest(id=task_id))
            return task_id, canceled

    task_id, canceled = asyncio.run(main())
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED

    def tree_ended() -> list[dict[str, str]] | None:
        runs = cluster.runs(task_id)
        return runs if runs and all(r["status"] == "canceled" for r in runs) else None

    runs = wait_until(tree_ended, 30, f"every run of the task to be canceled\n{cluster.worker_log()}")
    assert {r["agent"] for r in runs} == {"lead", "helper"}


def test_off_loopback_the_server_refuses_to_start_without_a_token(cluster: Cluster):
    team(cluster)
    out = cluster.shelly("a2a", "serve", "--host", "0.0.0.0", "--port", str(free_port()), timeout=60)
    assert out.returncode == 2
    assert "a2a serve: --host 0.0.0.0 is reachable from other machines: set SHELLY_A2A_TOKEN" in out.stderr


def test_with_a_token_the_card_is_public_and_declares_bearer_and_calls_need_the_token(cluster: Cluster,
                                                                                     procs: Processes):
    team(cluster)
    cluster.start_worker("w1")
    url = start_a2a(procs, "--host", "0.0.0.0", env={"SHELLY_A2A_TOKEN": TOKEN})
    status, card = http_get(f"{url}.well-known/agent-card.json")
    assert status == 200
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    refused = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}})
    assert refused.status_code == 401

    async def main() -> list[StreamResponse]:
        return [r async for r in stream(url, "investigate", headers={"Authorization": f"Bearer {TOKEN}"})]

    assert asyncio.run(main())[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


def test_message_stream_carries_a_reply_as_it_is_written(cluster: Cluster, procs: Processes):
    gate = threading.Event()
    text = "The logs are clean, nothing failed."
    with ModelServer(format="openai", default=Reply(text=text, stream_gate=gate)) as server:
        cluster.write_config(
            [scripted(lead=[delegate(("helper", "inspect the logs")), "lead done"]),
             {"name": "vendor", "kind": "openai", "model": "m", "base_url": server.url, "api_key": "k",
              "rate_limit": {"max_retries": 0}}],
            [{"name": "lead", "options": {"max_delegation_depth": 1}}, {"name": "helper", "provider": "vendor"}],
            distributed={"step_time_limit": 60, "visibility_timeout": 90},
        )
        cluster.start_worker("w1")
        served = start_a2a(procs)

        async def main() -> list[StreamResponse]:
            seen = []
            async for r in stream(served, "investigate"):
                seen.append(r)
                if is_delta(r):
                    gate.set()  # the helper's model still holds the rest of its reply until now
            return seen

        try:
            responses = asyncio.run(main())
        finally:
            gate.set()
    deltas = [r.status_update for r in responses if is_delta(r)]
    assert "".join(d.status.message.parts[0].text for d in deltas) == text
    assert deltas[0].metadata["agent"] == "helper-inspect-1"
    assert responses[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


def is_delta(response: StreamResponse) -> bool:
    """A ``working`` update carrying a piece of a reply's text."""
    meta = response.status_update.metadata if response.HasField("status_update") else None
    return meta is not None and "kind" in meta and meta["kind"] == "message_delta"


def test_on_the_pool_the_server_starts_only_its_agents_mcp_servers(cluster: Cluster, procs: Processes):
    from tests.integration.test_mcp_distributed import REPO_ROOT, SERVER_SCRIPT

    started_by = cluster.root / "started-by"
    cluster.write_config(
        [scripted(lead=["hello"])],
        [{"name": "lead", "description": "talks"},
         {"name": "adder", "description": "adds with the MCP server", "toolboxes": ["testbox"]}],
        mcp_servers=[{"name": "testbox", "command": SHELLY[0], "args": [str(SERVER_SCRIPT)],
                      "env": {"PYTHONPATH": str(REPO_ROOT), "TOOLBOX_STARTED_BY": str(started_by)}}],
    )
    cluster.start_worker("w1")  # starts the server for adder, which may run on it
    port = free_port()
    proc = procs.start("a2a", [*SHELLY, "a2a", "serve", "--port", str(port)])
    wait_for_http(f"http://127.0.0.1:{port}/.well-known/agent-card.json", proc, procs.log("a2a"))
    assert str(proc.pid) not in started_by.read_text().split(), "lead uses no MCP server"
