"""``approval:`` in an agent's config and ``@tool(approval=True)``: what they gate, bad entries named
with their field, and the engine's decisions embedded (``Session.approve``/``reject``, the listing,
``--always``) — the in-process half of what the spec suite runs on both runtimes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from shelly_dist.engine import Engine
from shelly_dist.engine.config import config_from_data
from shelly_dist.errors import ConfigError, UsageError
from shelly_dist.extensions.function_tool import tool_from_function
from shelly_dist.tools.decisions import Verdict

SET = {"tool_calls": [{"name": "shared_state_set", "arguments": {"key": "env", "value": "prod"}}]}


def config(approval: Any, script: list[Any] | None = None) -> dict[str, Any]:
    return {
        "providers": [{"name": "p", "kind": "scripted", "model": "m",
                       "script": {"keeper": script or [SET, "set said: {result}"]}}],
        "agents": [{"name": "keeper", "toolboxes": ["state"], "approval": approval}],
    }


def fails(data: dict[str, Any], field: str, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_data(data, {})
    assert info.value.field == field and text in str(info.value)


def test_a_toolbox_pattern_must_name_one_of_the_agents_toolboxes() -> None:
    fails(config({"tools": ["toolbox:filesystem"]}), "agents[0].approval.tools[0]",
          'toolbox "filesystem" is not one of this agent\'s toolboxes')


def test_an_empty_pattern_and_a_negative_timeout_are_named() -> None:
    fails(config({"tools": ["group:"]}), "agents[0].approval.tools[0]", "an empty pattern gates nothing")
    fails(config({"tools": ["x"], "timeout": -1}), "agents[0].approval.timeout", "must not be negative")


def test_an_unknown_key_in_approval_is_an_error() -> None:
    fails(config({"tools": ["x"], "timout": "1m"}), "agents[0].approval.timout", 'did you mean "timeout"?')


def test_the_approval_timeout_is_a_duration() -> None:
    cfg = config_from_data(config({"tools": ["toolbox:state"], "timeout": "10m"}), {})
    assert cfg.agents[0].approval is not None and cfg.agents[0].approval.timeout == 600


def test_a_decorated_tool_carries_its_approval_flag() -> None:
    def deploy(env: str) -> str:
        """Deploy."""
        return env

    assert tool_from_function(deploy, approval=True).approval
    assert not tool_from_function(deploy).approval


async def open_engine(tmp_path: Path, approval: Any) -> Engine:
    return await Engine.open(config_from_data(config(approval), {}), shelly_dir=tmp_path / ".shelly")


async def the_approval(session: Any) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + 30
    while not (found := await session.decisions()):
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)  # polling the open decisions: the condition, with a deadline
    return found[0]


async def test_embedded_a_gated_call_waits_for_session_approve_listed_with_its_arguments(tmp_path: Path) -> None:
    async with await open_engine(tmp_path, {"tools": ["shared_state_set"]}) as engine:
        session = engine.session(persist=False)
        sending = asyncio.create_task(session.send("go"))
        listed = await the_approval(session)
        assert (listed["id"], listed["kind"], listed["tool"], listed["arguments"], listed["path"]) == (
            "a-1", "approval", "shared_state_set", {"key": "env", "value": "prod"}, ["keeper"])
        assert await engine.decisions.list(kind="question") == []
        with pytest.raises(UsageError, match="a-1 is an approval"):
            await session.engine.decisions.answer(session.id, "a-1", "perhaps")
        await session.approve("a-1")
        reply = (await sending).reply.text_content()
    assert reply.startswith("set said: ") and "rejected" not in reply


async def test_embedded_always_decides_the_tools_later_calls_in_the_session(tmp_path: Path) -> None:
    script = [SET, SET, "done: {result}"]
    cfg = config({"tools": ["shared_state_set"]}, script)
    async with await Engine.open(config_from_data(cfg, {}), shelly_dir=tmp_path / ".shelly") as engine:
        session = engine.session(persist=False)
        sending = asyncio.create_task(session.send("go"))
        await session.reject((await the_approval(session))["id"], reason="frozen", always=True)
        reply = (await sending).reply.text_content()
    assert reply == "done: shared_state_set: rejected: frozen"


async def test_bulk_decisions_decide_every_match_and_count_them(tmp_path: Path) -> None:
    async with await open_engine(tmp_path, {"tools": ["shared_state_set"]}) as engine:
        sessions = [engine.session(persist=False) for _ in range(3)]
        sends = [asyncio.create_task(s.send("go")) for s in sessions]
        for s in sessions:
            await the_approval(s)
        assert await engine.decisions.decide_all(Verdict.approve(by="t"), tool="other_tool") == 0
        assert await engine.decisions.decide_all(Verdict.approve(by="t"), tool="shared_state_set") == 3
        replies = [(await s).reply.text_content() for s in sends]
    assert all("rejected" not in r for r in replies)
