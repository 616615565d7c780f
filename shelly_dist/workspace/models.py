"""What a team's workspace holds: channel messages, agent status, proposals, dead letters.

Message ids are the channel's sequence numbers (1, 2, …), so "after my ack cursor" and "up to the
high-water mark taken at wake time" are integer comparisons, and a cursor is one integer per agent.
"""

from __future__ import annotations

import itertools
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Kind = Literal["message", "tool_call", "system", "output", "debug"]
HIDDEN_KINDS = frozenset({"system", "output", "debug"})
"""Kinds an agent's channel read never shows (they are for people and logs)."""

NOT_INBOX_KINDS = HIDDEN_KINDS | {"tool_call"}
"""Kinds that never land in an inbox."""

MENTION = re.compile(r"@([A-Za-z][A-Za-z0-9_-]*)")
URGENT = re.compile(r"urgent|asap|blocked|critical", re.IGNORECASE)

USER = "user"
SYSTEM = "system"
"""The sender of what Shelly itself posts on a channel (kind ``system``: it wakes nobody)."""
"""The member name of a person writing from outside (``shelly send``, the MCP server)."""


class ChannelMessage(BaseModel):
    """One entry of the append-only channel."""

    model_config = ConfigDict(populate_by_name=True)

    id: int
    timestamp: float
    sender: str = Field(alias="from")
    content: str
    mentions: list[str] = Field(default_factory=list)
    to: str | None = None
    kind: Kind = "message"

    def as_json(self) -> dict[str, object]:
        """The agent-worker shape: ``{id, timestamp, from, content, mentions, to?, kind}``."""
        return self.model_dump(by_alias=True, exclude_none=True)


class InboxEntry(BaseModel):
    """A message waiting for an agent, with its priority."""

    message: ChannelMessage
    priority: Literal["normal", "high"] = "normal"


class AgentStatus(BaseModel):
    """What an agent says it is doing."""

    state: Literal["idle", "running", "stopped"] = "idle"
    task: str = ""
    updated_at: float = 0.0


def mentions_in(text: str, members: list[str] | set[str]) -> list[str]:
    """The team agents ``text`` @mentions, de-duplicated, in order of first mention."""
    seen: list[str] = []
    for name in MENTION.findall(text):
        if name in members and name not in seen:
            seen.append(name)
    return seen


def priority_of(message: ChannelMessage) -> Literal["normal", "high"]:
    """``high`` when several agents are mentioned or the text says it is urgent."""
    return "high" if len(message.mentions) > 1 or URGENT.search(message.content) else "normal"


def visible_to(message: ChannelMessage, agent: str) -> bool:
    """Whether ``agent``'s channel read shows ``message`` (DMs: sender and recipient only)."""
    if message.kind in HIDDEN_KINDS:
        return False
    return message.to is None or agent in (message.sender, message.to)


def for_inbox(message: ChannelMessage, agent: str) -> bool:
    """Whether ``message`` lands in ``agent``'s inbox: it mentions or DMs the agent, from someone else."""
    if message.kind in NOT_INBOX_KINDS or message.sender == agent:
        return False
    return message.to == agent or (agent in message.mentions and visible_to(message, agent))


class DeadLetter(BaseModel):
    """A wake that failed every attempt: the messages it could not handle stay unacked."""

    agent: str
    after: int
    """The agent's ack cursor when the wake began: the letter holds its inbox messages in (after, up_to]."""
    up_to: int
    error: str
    attempts: int
    failed_at: float


class WakeBudget(BaseModel):
    """How many wakes a session may start (a workflow's ``wake_budget:``; these defaults
    otherwise).

    Why: each wake is a new root run, so an agent's ``limits:`` bound one wake, never the chain;
    two agents that @mention each other would wake each other forever (issue 38: 928 wakes each
    in 30 s). Over any bound the session's wakes pause, with a ``wakes_paused`` event and a system
    post saying why; a message from the user resumes them (and starts the counts afresh)."""

    model_config = ConfigDict(extra="forbid")

    total: int = Field(200, ge=1)
    """Wakes in the whole session."""
    per_minute: int = Field(60, ge=1)
    """Wakes in any 60 seconds."""
    loop_rounds: int = Field(20, ge=0)
    """Rounds of two agents waking only each other (A, B, A, B…: 2 × this many wakes) with no
    message from the user in between before it counts as a loop; 0: no loop detection."""


class WakeLedger(BaseModel):
    """What a session's wakes have spent (kept in its workspace, changed atomically per wake)."""

    total: int = 0
    recent: list[float] = Field(default_factory=list)
    """Start times of the wakes of the last 60 seconds."""
    chain: list[str] = Field(default_factory=list)
    """The agents woken since the user last spoke, latest last (only the tail loop detection reads)."""
    paused: str = ""
    """Why the wakes are paused ("" while they run)."""
    paused_at: int = 0
    """The channel's last id when they paused: a user message after it resumes them."""

    def charge(self, agent: str, budget: WakeBudget, now: float, last_id: int) -> str:
        """Count a wake of ``agent``, or say why it must not start (the ledger then paused)."""
        self.recent = [t for t in self.recent if t > now - 60.0]
        reason = ""
        if self.total >= budget.total:
            reason = f"the session's wake budget is spent ({budget.total} wakes in all)"
        elif len(self.recent) >= budget.per_minute:
            reason = f"over {budget.per_minute} wakes in one minute"
        elif budget.loop_rounds and _ping_pong([*self.chain, agent], budget.loop_rounds):
            pair = " and ".join(sorted(set(self.chain[-2:])))
            reason = (f"a loop: {pair} woke only each other {budget.loop_rounds} rounds running, "
                      "with nothing from the user")
        if reason:
            self.paused, self.paused_at = reason, last_id
            return reason
        self.total += 1
        self.recent.append(now)
        self.chain = [*self.chain, agent][-(2 * budget.loop_rounds + 1):] if budget.loop_rounds else []
        return ""


def _ping_pong(chain: list[str], rounds: int) -> bool:
    """Whether the last ``2 * rounds + 1`` wakes alternate between the same two agents."""
    tail = chain[-(2 * rounds + 1):]
    if len(tail) < 2 * rounds + 1 or len(set(tail)) != 2:
        return False
    return all(a != b for a, b in itertools.pairwise(tail))
