"""``shelly serve`` on a real pool: real ``shelly worker`` and ``shelly serve`` subprocesses.

A session posted to the API runs a delegating team on the workers with no coordinator process;
the tree, the final reply, a child's events while it works and a cancel that ends the whole tree
are all seen through the API, from any replica (the server keeps nothing of its own).
"""

from __future__ import annotations

import threading
from typing import Any

import aiohttp
import pytest

from shelly_dist.testing.model_server import ModelServer, Reply, speaker

from .cluster import NEVER_IN_TIME, Cluster, delegate, scripted, slow_team, wait_until
from .ops import Processes
from .support.console import call, start_console
from .support.sse import read_sse

pytestmark = pytest.mark.integration

DONE = {"name": "task_complete", "arguments": {"status": "completed", "summary": "helped"}}


def team(cluster: Cluster, server: ModelServer) -> None:
    """``lead`` (scripted) delegates ``one`` and ``two`` to ``helper``, whose model is ``server``."""
    cluster.write_config(
        [scripted("lead", lead=[delegate(("helper", "one"), ("helper", "two")), "lead done"]),
         {"name": "mock", "kind": "openai", "model": "gpt-test", "base_url": server.url, "api_key": "k",
          "rate_limit": {"max_retries": 0}}],
        [{"name": "lead", "provider": "lead", "options": {"max_delegation_depth": 1}},
         {"name": "helper", "provider": "mock"}],
        distributed={"step_time_limit": 600, "visibility_timeout": 660},
    )


def holding_two(release: threading.Event) -> ModelServer:
    """A model for ``helper``: ``helper-two-…`` answers only once ``release`` is set."""
    return ModelServer(format="openai", responder=lambda request: Reply(
        tool_calls=[DONE], release=release if speaker(request).startswith("helper-two") else None))


def runs_of(url: str, session: str, token: str | None = None) -> list[dict[str, Any]]:
    status, body = call(f"{url}api/sessions/{session}/runs", token=token)
    return list(body["runs"]) if status == 200 else []


def test_a_posted_session_runs_a_delegating_team_on_the_pool_and_any_replica_shows_its_tree(
        cluster: Cluster, procs: Processes) -> None:
    with ModelServer(format="openai", default=Reply(tool_calls=[DONE])) as server:
        team(cluster, server)
        cluster.start_worker("w1")
        one, other = start_console(procs, name="serve-a"), start_console(procs, name="serve-b")
        status, started = call(f"{one}api/sessions", "POST", {"task": "go"})
        assert status == 201, started
        session, root = started["session"], started["run"]
        done = wait_until(lambda: (s := call(f"{other}api/sessions/{session}")[1]) and s.get("status") == "done"
                          and s, 120, f"the session's reply\n{cluster.worker_log()}")
        assert done["reply"] == "lead done" and done["root_runs"] == [root] and done["agent"] == "lead"
        runs = runs_of(other, session)
        assert [(r["id"], r["agent"], r["depth"], r["status"]) for r in runs[:1]] == [(root, "lead", 0, "done")]
        # instance numbers follow the order the worker claimed them in: helper-one-1 or helper-one-2
        children = sorted((r["instance"].rsplit("-", 1)[0], r["parent"], r["status"], r["worker"]) for r in runs[1:])
        assert children == [("helper-one", root, "done", "w1@" + cluster.id),
                            ("helper-two", root, "done", "w1@" + cluster.id)]
        assert runs[0]["tree"]["total_tokens"] == sum(r["own"]["total_tokens"] for r in runs) > 0
        listed = call(f"{other}api/sessions")[1]["sessions"]
        assert [s["id"] for s in listed] == [session] and listed[0]["tree"] == runs[0]["tree"]


async def test_the_event_stream_carries_a_childs_events_while_it_works(cluster: Cluster, procs: Processes) -> None:
    release = threading.Event()
    with holding_two(release) as server:
        team(cluster, server)
        cluster.start_worker("w1")
        url = start_console(procs)
        session = call(f"{url}api/sessions", "POST", {"task": "go"})[1]["session"]
        async with aiohttp.ClientSession() as http, http.get(f"{url}api/sessions/{session}/events") as stream:
            def of_two(kind: str) -> Any:
                return lambda messages: any(e["kind"] == kind and e["agent"].startswith("helper-two")
                                            for _, e in messages)

            await read_sse(stream, of_two("run_started"), timeout=120)
            two = next(r for r in runs_of(url, session) if r["instance"].startswith("helper-two"))
            assert two["status"] == "running"  # its model call is still held: it is working
            release.set()
            ended = await read_sse(stream, of_two("run_finished"), timeout=120)
        finished = next(e for _, e in ended if e["kind"] == "run_finished" and e["agent"].startswith("helper-two"))
        assert finished["data"]["status"] == "done" and finished["run_id"] == two["id"]
        assert all(i.count(":") == 1 for i, _ in ended)  # <stream entry id>:<index>


def test_cancel_through_the_api_ends_every_run_of_the_tree(cluster: Cluster, procs: Processes) -> None:
    with ModelServer(format="openai", default=Reply(text="never in time", delay=NEVER_IN_TIME)) as server:
        slow_team(cluster, server)
        cluster.start_worker("w1")
        url = start_console(procs)
        session = call(f"{url}api/sessions", "POST", {"task": "go"})[1]["session"]
        wait_until(lambda: sum(r["status"] == "running" and r["depth"] == 1 for r in runs_of(url, session)) == 2,
                   120, f"both children running\n{cluster.worker_log()}")
        status, body = call(f"{url}api/sessions/{session}/cancel", "POST", {})
        assert status == 200 and len(body["canceled"]) == 1
        runs = wait_until(lambda: (rs := runs_of(url, session)) and all(r["status"] == "canceled" for r in rs)
                          and rs, 120, f"every run canceled\n{cluster.worker_log()}")
        assert len(runs) == 3
        assert call(f"{url}api/sessions/{session}")[1]["status"] == "canceled"


def test_a_request_without_the_token_gets_401_and_with_it_is_answered(cluster: Cluster, procs: Processes) -> None:
    cluster.write_config([scripted(solo=["hi"])], [{"name": "solo"}])
    url = start_console(procs, env={"SHELLY_SERVE_TOKEN": "t0ken"})
    status, body = call(f"{url}api/sessions")
    assert status == 401 and "SHELLY_SERVE_TOKEN" in body["error"]
    assert call(f"{url}api/sessions", token="t0ken") == (200, {"sessions": [], "next": None})


def test_serve_on_every_address_without_a_token_refuses_to_start(cluster: Cluster) -> None:
    cluster.write_config([scripted(solo=["hi"])], [{"name": "solo"}])
    out = cluster.shelly("serve", "--host", "0.0.0.0", "--port", "0", timeout=60)
    assert out.returncode == 2
    assert "--host 0.0.0.0 is reachable from other machines: set SHELLY_SERVE_TOKEN" in out.stderr


async def test_mcp_on_the_same_port_runs_an_agent_on_the_pool_with_the_same_token(
        cluster: Cluster, procs: Processes) -> None:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    with ModelServer(format="openai", default=Reply(tool_calls=[DONE])) as server:
        team(cluster, server)
        cluster.start_worker("w1")
        url = start_console(procs, "--mcp", env={"SHELLY_SERVE_TOKEN": "t0ken"})
        client = httpx2.AsyncClient(headers={"authorization": "Bearer t0ken"}, timeout=120)
        async with client, streamable_http_client(f"{url}mcp", http_client=client) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            answer = await session.call_tool("agent_lead", {"task": "go"})
        assert not answer.is_error and answer.content[0].text == "lead done"
        async with httpx2.AsyncClient() as anonymous:
            assert (await anonymous.post(f"{url}mcp", json={})).status_code == 401
        # the run went through the pool: its children ran on the worker, as the console lists them
        listed = call(f"{url}api/sessions", token="t0ken")[1]["sessions"]
        runs = runs_of(url, listed[0]["id"], "t0ken")
        assert len(runs) == 3 and {r["worker"] for r in runs[1:]} == {"w1@" + cluster.id}
