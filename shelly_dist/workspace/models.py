"""What a team's workspace holds: channel messages, agent status, proposals, dead letters.

Message ids are the channel's sequence numbers (1, 2, …), so "after my ack cursor" and "up to the
high-water mark taken at wake time" are integer comparisons, and a cursor is one integer per agent.
"""

from __future__ import annotations

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
