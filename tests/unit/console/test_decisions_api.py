"""The console's decisions routes on the in-process backend: a gated call is listed by ``GET
/api/decisions`` in the documented shape, ``POST /api/decisions/{id}`` approves or rejects it,
``POST /api/decisions`` decides every match, and ``POST /api/sessions/{id}/steer`` reaches a run."""

from __future__ import annotations

from typing import Any

from shelly_dist.engine.config_models import Config
from tests.unit.console.test_local_api import start, wait_json

SET = {"tool_calls": [{"name": "shared_state_set", "arguments": {"key": "env", "value": "prod"}}]}


def gated_config() -> Config:
    return Config.model_validate({
        "providers": [{"name": "p", "kind": "scripted", "model": "m",
                       "script": {"keeper": [SET, "set said: {result}"]}}],
        "agents": [{"name": "keeper", "toolboxes": ["state"], "approval": {"tools": ["shared_state_set"]}}],
    })


async def pending(client: Any, session: str) -> dict[str, Any]:
    body = await wait_json(client, f"/api/decisions?session={session}", lambda b: b["decisions"], "a decision")
    return body["decisions"][0]


async def test_a_gated_call_is_listed_and_approved_through_the_api(console) -> None:
    client = await console(config=gated_config())
    session, _ = await start(client)
    listed = await pending(client, session)
    assert {k: listed[k] for k in ("id", "kind", "session", "tool", "arguments", "path")} == {
        "id": "a-1", "kind": "approval", "session": session, "tool": "shared_state_set",
        "arguments": {"key": "env", "value": "prod"}, "path": ["keeper"]}
    assert (await (await client.get("/api/decisions?kind=question")).json())["decisions"] == []
    both = await client.post("/api/decisions/a-1", json={"session": session, "answer": "yes", "decision": "approve"})
    assert both.status == 400
    approved = await client.post("/api/decisions/a-1", json={"session": session, "decision": "approve"})
    assert approved.status == 200, await approved.text()
    done = await wait_json(client, f"/api/sessions/{session}", lambda s: s["status"] == "done", "the reply")
    assert done["reply"].startswith("set said: ") and "rejected" not in done["reply"]
    again = await client.post("/api/decisions/a-1", json={"session": session, "decision": "reject"})
    assert again.status == 400 and "no open decision a-1" in (await again.json())["error"]


async def test_every_matching_approval_is_rejected_at_once_with_the_reason(console) -> None:
    client = await console(config=gated_config())
    sessions = [(await start(client))[0] for _ in range(2)]
    for session in sessions:
        await pending(client, session)
    decided = await client.post("/api/decisions", json={"decision": "reject", "tool": "shared_state_set",
                                                        "reason": "frozen"})
    assert (await decided.json()) == {"decided": 2}
    for session in sessions:
        done = await wait_json(client, f"/api/sessions/{session}", lambda s: s["status"] == "done", "the reply")
        assert done["reply"] == "set said: shared_state_set: rejected: frozen"


async def test_steering_a_session_that_has_no_live_run_is_a_400_naming_it(console) -> None:
    client = await console(config=gated_config())
    response = await client.post("/api/sessions/0123456789abcdef/steer", json={"text": "hello"})
    assert response.status == 400
    assert (await response.json())["error"].startswith("steer: no live run of a top-level run in session")


async def test_a_waiting_run_is_steered_and_interrupted_through_the_api(console) -> None:
    client = await console(config=gated_config())
    session, _ = await start(client)
    await pending(client, session)
    response = await client.post(f"/api/sessions/{session}/steer", json={"text": "stop", "interrupt": True})
    assert response.status == 200, await response.text()
    done = await wait_json(client, f"/api/sessions/{session}", lambda s: s["status"] == "done", "the reply")
    assert done["reply"] == "set said: skipped: the user interrupted"
