"""The engine wires the tool rules from config: ``loop_detection`` numbers and each agent's ``tools:``.

Every test runs an agent built by the engine (``Engine.session``) on the scripted provider, so
what is checked is the config → registry → run path, not the hook or policy classes alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shelly_dist.chats import ToolResult
from shelly_dist.engine import Engine, Session, config_from_data
from shelly_dist.errors import LoopDetected
from shelly_dist.providers.scripted import ScriptedCompleter

LIST_STATE = {"tool_calls": [{"name": "shared_state_list", "arguments": {}}]}


def config(script: list[Any], agent: dict[str, Any] | None = None, **top: Any) -> Any:
    return config_from_data(
        {
            "providers": [{"name": "p", "kind": "scripted", "model": "m", "script": {"*": script}}],
            "agents": [{"name": "solo", "toolboxes": ["state"], **(agent or {})}],
            **top,
        },
        {},
    )


def tool_texts(session: Session) -> list[str]:
    """The content of every tool result in the session's chat, in order."""
    return [p.content for m in session.agent.chat.messages() for p in m.parts if isinstance(p, ToolResult)]


async def test_loop_detection_warns_from_the_configured_warn_after(tmp_path: Path) -> None:
    cfg = config([LIST_STATE, LIST_STATE, "done"], loop_detection={"warn_after": 2, "stop_after": 5})
    async with await Engine.open(cfg, shelly_dir=tmp_path / ".shelly") as engine:
        session = engine.session()
        await session.send("go")
        first, second = tool_texts(session)
    assert "[warning:" not in first
    assert "called shared_state_list 2 times" in second and "stops after 5" in second


async def test_loop_detection_stops_past_the_configured_stop_after(tmp_path: Path) -> None:
    cfg = config([LIST_STATE] * 3 + ["done"], loop_detection={"warn_after": 1, "stop_after": 2})
    async with await Engine.open(cfg, shelly_dir=tmp_path / ".shelly") as engine:
        with pytest.raises(LoopDetected, match=r"shared_state_list called 3 times .* \(limit 2\)"):
            await engine.session().send("go")


async def test_default_loop_detection_lets_three_identical_calls_run(tmp_path: Path) -> None:
    async with await Engine.open(config([LIST_STATE] * 3 + ["done"]), shelly_dir=tmp_path / ".shelly") as engine:
        outcome = await engine.session().send("go")
    assert outcome.reply.text_content() == "done"


async def test_agent_tools_deny_hides_the_tool_from_the_model_and_refuses_a_call(tmp_path: Path) -> None:
    set_call = {"tool_calls": [{"name": "shared_state_set", "arguments": {"key": "k", "value": 1}}]}
    cfg = config([set_call, "done"], {"tools": {"deny": ["shared_state_set"]}})
    async with await Engine.open(cfg, shelly_dir=tmp_path / ".shelly") as engine:
        session = engine.session()
        await session.send("go")
        assert await engine.stores.store(session.id).get("k") is None
    completer = session.agent.completer.inner  # type: ignore[attr-defined]  # inside the metrics wrapper
    assert isinstance(completer, ScriptedCompleter)
    offered = completer.requests[0].tool_names
    assert "shared_state_get" in offered and "shared_state_set" not in offered
    assert tool_texts(session) == ["tool not found: shared_state_set"]


async def test_agent_tools_allow_by_group_keeps_only_that_group(tmp_path: Path) -> None:
    cfg = config(["done"], {"toolboxes": ["state", "tasks"], "tools": {"allow": ["group:tasks"]}})
    async with await Engine.open(cfg, shelly_dir=tmp_path / ".shelly") as engine:
        session = engine.session()
        await session.send("go")
    completer = session.agent.completer.inner  # type: ignore[attr-defined]  # inside the metrics wrapper
    assert isinstance(completer, ScriptedCompleter)
    offered = completer.requests[0].tool_names
    assert offered and all(name.startswith("shared_tasks_") for name in offered)
