"""A team (the reactor) gives the same transcript embedded and on the pool (two workers): the
coordinator's decisions, each member's output in roster order, the team's reply."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from shelly_dist.chats import Role
from shelly_dist.engine import Engine

from .support import Cluster, cluster

__all__ = ["cluster"]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def decision(*members: int, done: bool = False, **extra: Any) -> str:
    return json.dumps({"members": list(members), "done": done, "reasoning": "next", **extra})


SCRIPTS = {
    "researcher": ["three facts"], "writer": ["a draft using the facts"], "critic": ["tighten the intro", "approved"],
    "writers-room": ["not json at all", decision(0, 2), decision(1), decision(2),
                     decision(done=True, reply="published")],
}
CONFIG: dict[str, Any] = {
    "providers": [{"name": "fast", "kind": "scripted", "model": "script", "script": SCRIPTS}],
    "agents": [{"name": n, "description": f"the {n}"} for n in ("researcher", "writer", "critic")],
    "teams": [{"name": "writers-room", "description": "researches, drafts and reviews a piece",
               "members": ["researcher", "writer", "critic"],
               "coordinator": {"kind": "llm", "provider": "fast", "max_rounds": 6}}],
    "entry_agent": "writers-room",
}


async def transcript(cluster: Cluster, runtime: str) -> list[tuple[str, str]]:
    """The team's chat after ``shelly run --agent writers-room`` on ``runtime``: (role, text)."""
    if runtime == "pool":
        cluster.write_config(CONFIG["providers"], CONFIG["agents"], teams=CONFIG["teams"],
                             entry_agent="writers-room")
        cluster.start_workers("w1", "w2")
    else:
        (cluster.root / ".shelly" / "config.yaml").write_text(yaml.safe_dump(CONFIG, sort_keys=False))
    async with await Engine.open(None, shelly_dir=cluster.root / ".shelly", env=cluster.env()) as engine:
        session = engine.session(agent="writers-room", persist=False)
        await session.send("a piece on bees")
        return [(str(m.role), m.text_content() or "".join(r.content for r in m.tool_results()))
                for m in session.agent.chat.messages() if m.role != Role.SYSTEM]


async def test_a_writers_room_with_an_llm_coordinator_gives_the_same_transcript_embedded_and_on_two_workers(
        cluster: Cluster) -> None:
    embedded = await transcript(cluster, "embedded")
    pool = await transcript(cluster, "pool")
    assert embedded == pool
    texts = [t for _, t in embedded]
    assert texts[1] == "round 1: researcher, critic"  # the corrected decision; the invalid one never ran
    first = json.loads(texts[2])
    assert [e["agent"] for e in first] == ["researcher", "critic"] and first[0]["result"] == "three facts"
    assert json.loads(texts[-2])[0]["result"] == "approved"  # the critic's second turn continued its chat
    assert texts[-1] == "published"
