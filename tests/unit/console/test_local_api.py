"""The console's API on the in-process backend (no broker): a session's tree, its chat, its
events and cancel, from the engine's own runs."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from tests.integration.support.sse import read_sse
from tests.unit.console.conftest import team_config

DEADLINE = 30.0


async def wait_json(client: Any, path: str, condition: Any, what: str) -> Any:
    deadline = time.monotonic() + DEADLINE
    while True:
        response = await client.get(path)
        body = await response.json()
        if response.status == 200 and condition(body):
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last {path}: {body}")
        await asyncio.sleep(0.05)


async def start(client: Any, **body: Any) -> tuple[str, str]:
    response = await client.post("/api/sessions", json={"task": "go", **body})
    assert response.status == 201, await response.text()
    started = await response.json()
    return started["session"], started["run"]


async def test_a_posted_session_runs_the_team_and_its_tree_shows_the_lead_and_both_children(console) -> None:
    client = await console()
    session, root = await start(client)
    done = await wait_json(client, f"/api/sessions/{session}", lambda s: s["status"] == "done", "the reply")
    assert done["reply"] == "lead done" and done["root_runs"] == [root] and done["agent"] == "lead"
    runs = (await (await client.get(f"/api/sessions/{session}/runs")).json())["runs"]
    assert (runs[0]["instance"], runs[0]["depth"], runs[0]["status"]) == ("lead", 0, "done")
    assert sorted((r["instance"], r["depth"], r["status"]) for r in runs[1:]) == [
        ("helper-one-1", 1, "done"), ("helper-two-2", 1, "done")]
    assert {r["parent"] for r in runs[1:]} == {root} and all(r["agent"] == "helper" for r in runs[1:])
    lead = runs[0]
    assert lead["tree"]["total_tokens"] == sum(r["own"]["total_tokens"] for r in runs)
    assert done["tree"] == lead["tree"]


async def test_the_session_list_is_newest_first_and_paginated(console) -> None:
    client = await console()
    ids = [(await start(client))[0] for _ in range(3)]
    first = await (await client.get("/api/sessions?limit=2")).json()
    assert [s["id"] for s in first["sessions"]] == ids[::-1][:2] and first["next"]
    rest = await (await client.get(f"/api/sessions?limit=2&cursor={first['next']}")).json()
    assert [s["id"] for s in rest["sessions"]] == [ids[0]] and rest["next"] is None


async def test_a_runs_chat_lists_its_messages_step_by_step(console) -> None:
    client = await console()
    session, root = await start(client)
    await wait_json(client, f"/api/sessions/{session}", lambda s: s["status"] == "done", "the reply")
    chat = await (await client.get(f"/api/runs/{root}/chat")).json()
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert chat["complete"] is True and chat["run"]["id"] == root  # the top-level agent's own chat
    assert chat["messages"][4]["parts"][0]["text"] == "lead done"
    runs = (await (await client.get(f"/api/sessions/{session}/runs")).json())["runs"]
    child = next(r for r in runs if r["task"] == "one")
    rebuilt = await (await client.get(f"/api/runs/{child['id']}/chat")).json()
    assert rebuilt["complete"] is False  # a delegated run's, from its events
    assert [m["role"] for m in rebuilt["messages"]] == ["user", "assistant", "tool"]
    assert rebuilt["messages"][0]["parts"][0]["text"] == "one"
    call = rebuilt["messages"][1]["parts"][0]
    assert call["kind"] == "tool_call" and call["name"] == "task_complete" and call["id"]
    assert json.loads(call["arguments"]) == {"status": "completed", "summary": "helped one"}
    assert rebuilt["messages"][2]["parts"][0] == {"kind": "tool_result", "tool_call_id": call["id"],
                                                  "content": "Task marked as completed."}


async def test_the_event_stream_resumes_after_the_last_event_id(console) -> None:
    client = await console()
    session, _ = await start(client)
    await wait_json(client, f"/api/sessions/{session}", lambda s: s["status"] == "done", "the reply")
    async with client.get(f"/api/sessions/{session}/events") as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        everything = await read_sse(response, lambda m: any(e["kind"] == "agent_end" for _, e in m))
    kinds = [e["kind"] for _, e in everything]
    assert "run_started" in kinds and "run_finished" in kinds and all(e["session_id"] == session
                                                                      for _, e in everything)
    cut = len(everything) // 2
    async with client.get(f"/api/sessions/{session}/events",
                          headers={"Last-Event-ID": everything[cut][0]}) as response:
        rest = await read_sse(response, lambda m: len(m) >= len(everything) - cut - 1)
    assert rest == everything[cut + 1:]


async def test_a_quiet_stream_sends_keep_alive_comments(console) -> None:
    client = await console(keepalive=0.1)
    session, _ = await start(client)
    await wait_json(client, f"/api/sessions/{session}", lambda s: s["status"] == "done", "the reply")
    async with client.get(f"/api/sessions/{session}/events") as response:
        seen = b""
        while b": keep-alive" not in seen:
            seen += await asyncio.wait_for(response.content.readany(), DEADLINE)


async def test_cancel_ends_every_run_of_the_tree(console) -> None:
    slow = [{"delay": 60, "tool_calls": [{"name": "task_complete",
                                          "arguments": {"status": "completed", "summary": "late"}}]}]
    client = await console(config=team_config(helper=slow))
    session, _ = await start(client)
    await wait_json(client, f"/api/sessions/{session}/runs",
                    lambda b: sum(r["status"] == "running" for r in b["runs"]) == 3, "both children running")
    response = await client.post(f"/api/sessions/{session}/cancel")
    assert response.status == 200 and (await response.json())["canceled"]
    runs = await wait_json(client, f"/api/sessions/{session}/runs",
                           lambda b: all(r["status"] == "canceled" for r in b["runs"]), "every run canceled")
    assert len(runs["runs"]) == 3
    assert (await (await client.get(f"/api/sessions/{session}")).json())["status"] == "canceled"


async def test_bad_requests_name_what_is_wrong(console) -> None:
    client = await console()
    cases = [
        (client.post("/api/sessions", json={"agent": "lead"}), 400, "task: Field required"),
        (client.post("/api/sessions", json={"task": "x", "colour": "red"}), 400, "colour"),
        (client.post("/api/sessions", data=b"{not json", headers={"Content-Type": "application/json"}), 400,
         "not JSON"),
        (client.post("/api/sessions", json={"task": "x", "agent": "nobody"}), 400, 'unknown agent "nobody"'),
        (client.get("/api/sessions?limit=0"), 400, "limit"),
        (client.get("/api/sessions/0123456789abcdef"), 404, "session 0123456789abcdef not found"),
        (client.get("/api/runs/abc/chat"), 404, "run abc not found"),
        (client.delete("/api/sessions"), 405, "Method Not Allowed"),
    ]
    for request, status, text in cases:
        response = await request
        body = await response.json()
        assert response.status == status and text in body["error"], (status, body)


async def test_a_bad_last_event_id_is_refused_before_the_stream_begins(console) -> None:
    client = await console()
    session, _ = await start(client)
    response = await client.get(f"/api/sessions/{session}/events", headers={"Last-Event-ID": "nonsense"})
    assert response.status == 400 and "Last-Event-ID" in (await response.json())["error"]
