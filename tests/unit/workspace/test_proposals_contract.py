"""Proposals and votes, identical in memory and in Redis."""

from __future__ import annotations

import pytest

from shelly_dist.errors import StoreError
from shelly_dist.workspace import Workspace
from tests.unit.state.test_slots import eventually


async def test_creating_mentions_every_other_agent(ws: Workspace) -> None:
    proposal = await ws.propose("coder", type="decision", title="Which db?", options=["pg", "sqlite"])
    assert proposal.quorum == 3
    announcement = (await ws.read(None))[-1]
    assert announcement.mentions == ["reviewer", "tester"]


async def test_a_majority_vote_resolves_at_quorum_and_announces_the_winner(ws: Workspace) -> None:
    p = await ws.propose("coder", type="decision", title="db", options=["pg", "sqlite"], resolution="majority")
    await ws.vote("coder", p.id, "pg")
    await ws.vote("reviewer", p.id, "sqlite")
    await ws.vote("reviewer", p.id, "pg")  # changed while active
    done = await ws.vote("tester", p.id, "sqlite")
    assert done.status == "resolved" and done.label(done.winner) == "pg"
    last = (await ws.read(None))[-1]
    assert last.content.startswith(f"Proposal {p.id} resolved! Winner: pg")
    assert last.mentions == ["coder", "reviewer", "tester"]
    assert (await ws.proposal(p.id)).status == "resolved"


async def test_majority_without_more_than_half_has_no_winner(ws: Workspace) -> None:
    p = await ws.propose("coder", type="decision", title="x", options=["a", "b", "c"], resolution="majority")
    for agent, choice in (("coder", "a"), ("reviewer", "b"), ("tester", "c")):
        done = await ws.vote(agent, p.id, choice)
    assert done.status == "resolved" and done.winner is None


async def test_a_vote_must_name_an_existing_option(ws: Workspace) -> None:
    p = await ws.propose("coder", type="approval", title="merge?", options=[])
    assert [o.label for o in p.options] == ["approve", "reject"]
    with pytest.raises(StoreError, match='has no option "maybe"'):
        await ws.vote("coder", p.id, "maybe")


async def test_voters_are_members(ws: Workspace) -> None:
    p = await ws.propose("coder", type="decision", title="x", options=["a", "b"])
    with pytest.raises(StoreError, match="ghost is not a member"):
        await ws.vote("ghost", p.id, "a")


async def test_only_the_creator_cancels(ws: Workspace) -> None:
    p = await ws.propose("coder", type="decision", title="x", options=["a", "b"])
    with pytest.raises(StoreError, match="only coder"):
        await ws.cancel("reviewer", p.id)
    assert (await ws.cancel("coder", p.id)).status == "cancelled"
    with pytest.raises(StoreError, match="is cancelled"):
        await ws.vote("tester", p.id, "a")


async def test_expiry_applies_the_proposals_own_rule(ws: Workspace) -> None:
    p = await ws.propose("coder", type="decision", title="x", options=["a", "b"], resolution="unanimous",
                         expires_in=0.5)
    await ws.vote("coder", p.id, "a")
    await ws.vote("reviewer", p.id, "b")

    async def settled() -> bool:
        return (await ws.proposal(p.id)).status != "active"

    await eventually(settled)
    found = await ws.proposal(p.id)
    assert found.status == "resolved" and found.winner is None  # plurality would have picked "a"


async def test_creator_decides_a_tie(ws: Workspace) -> None:
    p = await ws.propose("tester", type="decision", title="x", options=["a", "b"], tie_breaker="creator-decides",
                         quorum=2)
    await ws.vote("coder", p.id, "a")
    done = await ws.vote("tester", p.id, "b")
    assert done.label(done.winner) == "b"


async def test_a_binding_election_makes_the_winner_the_documents_only_writer(ws: Workspace) -> None:
    p = await ws.propose("coder", type="election", title="owner of plan.md", options=["coder", "reviewer"],
                         document="plan.md", quorum=2)
    await ws.vote("coder", p.id, "reviewer")
    await ws.vote("tester", p.id, "reviewer")
    await ws.doc_write("reviewer", "plan.md", "mine")
    with pytest.raises(StoreError, match='owned by reviewer'):
        await ws.doc_write("coder", "plan.md", "theirs")
    assert await ws.doc_read("plan.md") == "mine"
