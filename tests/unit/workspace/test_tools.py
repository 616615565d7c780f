"""The ``team`` toolbox: agent-worker's names, the calling agent as sender."""

from __future__ import annotations

import json

import pytest

from shelly_dist.errors import ShellyError
from shelly_dist.workspace import MemoryWorkspace
from shelly_dist.workspace.tools import team_tools
from tests.unit.state.test_tools import call
from tests.unit.workspace.conftest import TEAM

NAMES = ["channel_send", "channel_read", "my_inbox", "my_inbox_ack", "my_status_set", "team_members",
         "team_doc_read", "team_doc_write", "team_doc_append", "team_doc_list", "team_doc_create",
         "resource_create", "resource_read", "team_proposal_create", "team_proposal_vote", "team_vote",
         "team_proposal_status", "team_proposal_cancel"]


@pytest.fixture
async def ws() -> MemoryWorkspace:
    workspace = MemoryWorkspace()
    await workspace.join(TEAM)
    return workspace


def test_the_toolbox_is_named_team_with_agent_workers_tool_names(ws: MemoryWorkspace) -> None:
    box = team_tools(ws, "coder")
    assert box.name == "team" and box.names() == NAMES


def test_the_sender_is_never_an_argument(ws: MemoryWorkspace) -> None:
    schema = team_tools(ws, "coder").get("channel_send").input_schema  # type: ignore[union-attr]
    assert set(schema["properties"]) == {"message", "to"}


async def test_a_post_is_sent_as_the_calling_agent_and_lands_in_the_inbox(ws: MemoryWorkspace) -> None:
    await call(team_tools(ws, "coder"), "channel_send", {"message": "@reviewer please review"})
    reviewer = team_tools(ws, "reviewer")
    inbox = json.loads(await call(reviewer, "my_inbox", {}))
    assert [(m["from"], m["content"], m["priority"]) for m in inbox] == [("coder", "@reviewer please review", "normal")]
    assert json.loads(await call(reviewer, "my_inbox_ack", {"until": inbox[0]["id"]})) == {"cursor": 1}
    assert json.loads(await call(reviewer, "my_inbox", {})) == []


async def test_documents_through_the_tools(ws: MemoryWorkspace) -> None:
    box = team_tools(ws, "coder")
    await call(box, "team_doc_create", {"name": "plan.md", "content": "a"})
    await call(box, "team_doc_append", {"name": "plan.md", "content": "b"})
    assert await call(box, "team_doc_read", {"name": "plan.md"}) == "ab"
    with pytest.raises(ShellyError, match="already exists"):
        await call(box, "team_doc_create", {"name": "plan.md"})


async def test_a_vote_through_the_tools_is_cast_as_the_calling_agent(ws: MemoryWorkspace) -> None:
    created = json.loads(await call(team_tools(ws, "coder"), "team_proposal_create",
                                    {"type": "decision", "title": "db", "options": ["pg", "sqlite"], "quorum": 1}))
    done = json.loads(await call(team_tools(ws, "tester"), "team_vote", {"proposal": created["id"], "choice": "pg"}))
    assert done["votes"] == {"tester": "o1"} and done["winner"] == "pg" and done["status"] == "resolved"
