"""Proposals and votes: the rules, as pure functions over a :class:`Proposal`.

A proposal is decided once ``quorum`` votes are in, or when it expires, by its own ``resolution``
rule (expiry does not fall back to plurality): ``plurality`` — the most votes; ``majority`` — more
than half the votes cast; ``unanimous`` — every vote for one option. Ties among the leaders go to
the ``tie_breaker``: ``first`` (the option listed first), ``random``, or ``creator-decides`` (the
creator's own vote if it is among the leaders, else the first). Without a winner (no majority,
no unanimity, no votes) the proposal ends ``resolved`` with ``winner`` unset.
"""

from __future__ import annotations

import random
import time
import uuid
from typing import Literal

from pydantic import BaseModel, Field

from shelly_dist.errors import StoreError

ProposalType = Literal["election", "decision", "approval", "assignment"]
Resolution = Literal["plurality", "majority", "unanimous"]
TieBreaker = Literal["first", "random", "creator-decides"]


class Option(BaseModel):
    id: str
    label: str


class Proposal(BaseModel):
    """One question put to the team, its votes and (once decided) its winner."""

    id: str
    type: ProposalType
    title: str
    options: list[Option]
    resolution: Resolution = "plurality"
    tie_breaker: TieBreaker = "first"
    quorum: int
    creator: str
    created_at: float
    expires_at: float | None = None
    status: Literal["active", "resolved", "cancelled"] = "active"
    votes: dict[str, str] = Field(default_factory=dict)
    winner: str | None = None
    document: str | None = None
    """For a binding election: the document whose owner the winner becomes."""

    def label(self, option_id: str | None) -> str:
        return next((o.label for o in self.options if o.id == option_id), "none")


def new_proposal(
    *,
    type: ProposalType,
    title: str,
    options: list[str],
    creator: str,
    team_size: int,
    resolution: Resolution = "plurality",
    tie_breaker: TieBreaker = "first",
    quorum: int | None = None,
    expires_in: float | None = None,
    document: str | None = None,
) -> Proposal:
    """A fresh active proposal; an approval always offers approve/reject."""
    labels = ["approve", "reject"] if type == "approval" else options
    if len(labels) < 2:
        raise StoreError("team_proposal_create: a proposal needs at least two options")
    if len(set(labels)) != len(labels):
        raise StoreError("team_proposal_create: options must be distinct")
    if document and type != "election":
        raise StoreError("team_proposal_create: only an election can bind a document's owner")
    now = time.time()
    return Proposal(
        id=f"p-{uuid.uuid4().hex[:8]}", type=type, title=title,
        options=[Option(id=f"o{i + 1}", label=label) for i, label in enumerate(labels)],
        resolution=resolution, tie_breaker=tie_breaker, quorum=max(1, quorum or team_size),
        creator=creator, created_at=now, expires_at=None if expires_in is None else now + expires_in,
        document=document,
    )


def option_id(proposal: Proposal, choice: str) -> str:
    """The id of the option ``choice`` names (by id or label); an unknown choice is an error."""
    for option in proposal.options:
        if choice in (option.id, option.label):
            return option.id
    labels = ", ".join(o.label for o in proposal.options)
    raise StoreError(f'team_vote: proposal {proposal.id} has no option "{choice}" (options: {labels})')


def winner_of(proposal: Proposal, rng: random.Random | None = None) -> str | None:
    """The winning option id by the proposal's own rule, or ``None`` when the rule gives none."""
    cast = len(proposal.votes)
    if cast == 0:
        return None
    counts = {o.id: 0 for o in proposal.options}
    for choice in proposal.votes.values():
        counts[choice] += 1
    top = max(counts.values())
    if proposal.resolution == "majority" and top * 2 <= cast:
        return None
    if proposal.resolution == "unanimous" and top != cast:
        return None
    leaders = [o.id for o in proposal.options if counts[o.id] == top]
    if len(leaders) == 1 or proposal.tie_breaker == "first":
        return leaders[0]
    if proposal.tie_breaker == "random":
        return (rng or random.Random()).choice(leaders)
    own = proposal.votes.get(proposal.creator)
    return own if own in leaders else leaders[0]


def settle(proposal: Proposal, now: float) -> bool:
    """Resolve ``proposal`` in place when its quorum is met or it has expired; True if it did."""
    if proposal.status != "active":
        return False
    expired = proposal.expires_at is not None and now >= proposal.expires_at
    if len(proposal.votes) < proposal.quorum and not expired:
        return False
    proposal.winner = winner_of(proposal)
    proposal.status = "resolved"
    return True
