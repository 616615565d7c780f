"""``shelly mcp serve --agents --decisions`` (issue 35): an MCP client sees a served agent's gated
tool call in ``pending_decisions`` and approves it with ``decide`` while the agent call waits."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from .test_mcp_serve import stdio_session, text

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def write_config(root: Path) -> None:
    config = {
        "providers": [{"name": "p", "kind": "scripted", "model": "m", "script": {"keeper": [
            {"tool_calls": [{"name": "shared_state_set", "arguments": {"key": "env", "value": "prod"}}]},
            "set said: {result}"]}}],
        "agents": [{"name": "keeper", "toolboxes": ["state"], "approval": {"tools": ["shared_state_set"]}}],
    }
    (root / ".shelly").mkdir(parents=True, exist_ok=True)
    (root / ".shelly" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def test_a_client_approves_a_served_agents_gated_call_while_the_agent_call_waits(tmp_path: Path) -> None:
    write_config(tmp_path)

    async def main() -> tuple[list[dict[str, object]], str, str]:
        async with stdio_session(tmp_path, "--agents", "--decisions") as session:
            call = asyncio.create_task(session.call_tool("agent_keeper", {"task": "keep the env"}))
            deadline = asyncio.get_running_loop().time() + 60
            while not (listed := json.loads(text(await session.call_tool("pending_decisions", {})))):
                assert asyncio.get_running_loop().time() < deadline, "no decision was listed"
                assert not call.done(), text(call.result())
                await asyncio.sleep(0.1)  # polling the decisions: the condition, with a deadline
            decided = text(await session.call_tool("decide", {"id": listed[0]["id"], "answer": "yes"}))
            return listed, decided, text(await call)

    listed, decided, answer = asyncio.run(main())
    assert [(d["kind"], d["tool"], d["arguments"]) for d in listed] == [
        ("approval", "shared_state_set", {"key": "env", "value": "prod"})]
    assert decided == "decided a-1"
    assert answer.startswith("set said: ") and "rejected" not in answer
