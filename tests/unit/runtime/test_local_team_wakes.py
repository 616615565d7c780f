"""Wakes embedded: an @mention runs the agent on this loop, its reply is posted, its inbox acked."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from shelly_dist.engine import Engine, config_from_data
from shelly_dist.runtime.local.wakes import LocalWakes
from shelly_dist.runtime.wake import WakeSettings
from shelly_dist.workspace import USER, Workspace
from tests.unit.engine.test_engine import drain
from tests.unit.state.test_slots import eventually


def send(message: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "channel_send", "arguments": {"message": message}}]}


REVIEW_SCRIPT = {
    "coder": [send("@reviewer patch ready, please review"), "patch written"],
    "reviewer": [{"tool_calls": [{"name": "team_doc_write", "arguments": {"content": "review: approved"}}]},
                 "approved"],
}


async def open_team(tmp_path: Path, script: dict[str, Any], **agent: Any) -> Engine:
    cfg = config_from_data({
        "providers": [{"name": "p", "kind": "scripted", "model": "m", "script": script}],
        "agents": [{"name": name, "toolboxes": ["team"], **agent} for name in ("coder", "reviewer")],
    }, {})
    return await Engine.open(cfg, shelly_dir=tmp_path / ".shelly")


@pytest.fixture
async def ws(tmp_path: Path) -> AsyncIterator[Workspace]:
    async with await open_team(tmp_path, REVIEW_SCRIPT) as engine:
        workspace = engine.stores.workspace("s1")
        await workspace.join(["coder", "reviewer"])
        yield workspace


async def test_a_mention_wakes_the_agent_whose_mentions_wake_the_next(ws: Workspace) -> None:
    await ws.send(USER, "@coder please fix the parser")
    await eventually(ws.idle)
    channel = [(m.sender, m.content) for m in await ws.read(None)]
    assert channel == [
        (USER, "@coder please fix the parser"),
        ("coder", "@reviewer patch ready, please review"),
        ("reviewer", "approved"),
        ("coder", "patch written"),
    ] or channel == [
        (USER, "@coder please fix the parser"),
        ("coder", "@reviewer patch ready, please review"),
        ("coder", "patch written"),
        ("reviewer", "approved"),
    ]
    assert await ws.doc_read() == "review: approved"
    assert await ws.cursor("coder") >= 1 and await ws.cursor("reviewer") >= 2


async def test_a_failing_wake_is_retried_then_dead_lettered_and_never_acked_as_done(tmp_path: Path) -> None:
    failing = {"coder": [{"error": "model down"}]}
    async with await open_team(tmp_path, failing) as engine:
        assert isinstance(engine.wakes, LocalWakes)
        engine.wakes.settings = WakeSettings(attempts=3, backoff=0.01)
        ws = engine.stores.workspace("s1")
        await ws.join(["coder", "reviewer"])
        await ws.send(USER, "@coder do it")

        async def dead() -> bool:
            return bool(await ws.dead_letters())

        await eventually(dead)
        letter = (await ws.dead_letters())[0]
    assert (letter.agent, letter.after, letter.up_to, letter.attempts) == ("coder", 0, 1, 3)
    assert "model down" in letter.error
    assert [m.sender for m in await ws.read(None)] == [USER]  # nothing was posted for the failure


async def test_wakes_posts_and_acks_are_events_on_the_engines_bus(tmp_path: Path) -> None:
    async with await open_team(tmp_path, REVIEW_SCRIPT) as engine:
        sub = engine.bus.subscribe()
        ws = engine.stores.workspace("s1")
        await ws.join(["coder", "reviewer"])
        await ws.send(USER, "@coder go")
        await eventually(ws.idle)
        team = [e for e in await drain(sub) if e.kind in ("wake_started", "wake_finished", "channel_post", "inbox_ack")]
    seen = [(e.kind, e.agent) for e in team]
    assert seen[:2] == [("channel_post", USER), ("wake_started", "coder")]
    assert ("inbox_ack", "coder") in seen and ("wake_finished", "reviewer") in seen
    assert {e.session_id for e in team} == {"s1"}
