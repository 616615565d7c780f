"""The ``team`` toolbox: agent-worker's collaboration tools over a session's workspace.

Built per agent (``team_tools(workspace, agent)``): the sender of a post, the owner of an inbox
and the voter are always that agent, never an argument a model could forge. Outputs are compact
JSON (a post returns its message, a read the messages in agent-worker's shape).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field

from shelly_dist.tools import ToolBox, tool_from_model
from shelly_dist.workspace.base import DEFAULT_DOCUMENT, RECENT, WorkspaceBase
from shelly_dist.workspace.proposals import Proposal, ProposalType, Resolution, TieBreaker


class SendInput(BaseModel):
    message: str = Field(description="The message; @name mentions wake those agents.")
    to: str | None = Field(None, description="Send as a direct message to this agent only.")


class ReadInput(BaseModel):
    since: int = Field(0, ge=0, description="Only messages with an id above this one.")
    limit: int = Field(RECENT, ge=1, le=500, description="At most this many (the newest).")


class Empty(BaseModel):
    pass


class AckInput(BaseModel):
    until: int = Field(ge=0, description="Ack every inbox message up to this message id.")


class StatusInput(BaseModel):
    status: Literal["idle", "running", "stopped"] = Field(description="What you are doing.")
    task: str = Field("", description="The task you are on, in a few words.")


class DocInput(BaseModel):
    name: str = Field(DEFAULT_DOCUMENT, description="Document name (default notes.md).")


class DocWriteInput(BaseModel):
    name: str = Field(DEFAULT_DOCUMENT, description="Document name (default notes.md).")
    content: str = Field(description="The text.")


class DocCreateInput(BaseModel):
    name: str = Field(description="The new document's name; fails when it exists.")
    content: str = Field("", description="Its initial text.")


class ResourceCreateInput(BaseModel):
    content: str = Field(description="The content to store (stored once per distinct content).")


class ResourceReadInput(BaseModel):
    id: str = Field(description="The resource id (its sha256).")


class ProposalCreateInput(BaseModel):
    type: ProposalType = Field(description="election | decision | approval | assignment.")
    title: str = Field(description="The question.")
    options: list[str] = Field(default_factory=list, description="The choices (approval: approve/reject).")
    resolution: Resolution = Field("plurality", description="plurality | majority | unanimous.")
    tie_breaker: TieBreaker = Field("first", description="first | random | creator-decides.")
    quorum: int | None = Field(None, ge=1, description="Votes needed to decide (default: the team size).")
    expires_in: float | None = Field(None, gt=0, description="Seconds until it is decided with the votes in.")
    document: str | None = Field(None, description="Election only: the document its winner will own.")


class VoteInput(BaseModel):
    proposal: str = Field(description="The proposal id.")
    choice: str = Field(description="The option's label or id; voting again changes your vote.")


class ProposalInput(BaseModel):
    proposal: str | None = Field(None, description="The proposal id (omit: every proposal).")


class CancelInput(BaseModel):
    proposal: str = Field(description="The proposal id (only its creator may cancel it).")


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _proposal(p: Proposal) -> dict[str, Any]:
    out = p.model_dump(exclude_none=True)
    out["winner"] = p.label(p.winner) if p.winner else None
    return out


def team_tools(ws: WorkspaceBase, agent: str) -> ToolBox:
    """The ``team`` toolbox of ``agent`` over ``ws``."""

    async def send(inp: SendInput) -> str:
        return _json((await ws.send(agent, inp.message, to=inp.to)).as_json())

    async def read(inp: ReadInput) -> str:
        return _json([m.as_json() for m in await ws.read(agent, since=inp.since, limit=inp.limit)])

    async def inbox(_inp: Empty) -> str:
        return _json([{**e.message.as_json(), "priority": e.priority} for e in await ws.inbox(agent)])

    async def ack(inp: AckInput) -> str:
        return _json({"cursor": await ws.ack(agent, inp.until)})

    async def status(inp: StatusInput) -> str:
        return (await ws.status_set(agent, inp.status, inp.task)).model_dump_json()

    async def members(_inp: Empty) -> str:
        statuses = await ws.statuses()
        return _json([{"name": m, **(statuses[m].model_dump() if m in statuses else {"state": "idle"})}
                      for m in await ws.members()])

    async def doc_read(inp: DocInput) -> str:
        return await ws.doc_read(inp.name)

    async def doc_write(inp: DocWriteInput) -> str:
        await ws.doc_write(agent, inp.name, inp.content)
        return "ok"

    async def doc_append(inp: DocWriteInput) -> str:
        await ws.doc_append(agent, inp.name, inp.content)
        return "ok"

    async def doc_list(_inp: Empty) -> str:
        return _json(await ws.doc_list())

    async def doc_create(inp: DocCreateInput) -> str:
        await ws.doc_create(agent, inp.name, inp.content)
        return "ok"

    async def resource_create(inp: ResourceCreateInput) -> str:
        return _json({"id": await ws.resource_create(inp.content)})

    async def resource_read(inp: ResourceReadInput) -> str:
        return await ws.resource_read(inp.id)

    async def propose(inp: ProposalCreateInput) -> str:
        return _json(_proposal(await ws.propose(agent, **inp.model_dump())))

    async def vote(inp: VoteInput) -> str:
        return _json(_proposal(await ws.vote(agent, inp.proposal, inp.choice)))

    async def proposal_status(inp: ProposalInput) -> str:
        if inp.proposal:
            return _json(_proposal(await ws.proposal(inp.proposal)))
        return _json([_proposal(p) for p in await ws.proposals()])

    async def cancel(inp: CancelInput) -> str:
        return _json(_proposal(await ws.cancel(agent, inp.proposal)))

    tools: list[tuple[str, str, type[BaseModel], Any, bool]] = [
        ("channel_send", "Post to the team channel; @name wakes that agent. Over 1,200 characters "
                         "the text is stored as a resource and a short pointer is posted.", SendInput, send, False),
        ("channel_read", "Read the recent team channel (what you may see).", ReadInput, read, True),
        ("my_inbox", "Your unacked messages: those that @mention you or are DMs to you.", Empty, inbox, True),
        ("my_inbox_ack", "Mark your inbox read up to a message id.", AckInput, ack, True),
        ("my_status_set", "Tell the team what you are doing.", StatusInput, status, True),
        ("team_members", "The team's agents and their status.", Empty, members, True),
        ("team_doc_read", "Read a shared document.", DocInput, doc_read, True),
        ("team_doc_write", "Replace a shared document's text.", DocWriteInput, doc_write, True),
        ("team_doc_append", "Append to a shared document.", DocWriteInput, doc_append, False),
        ("team_doc_list", "List the shared documents.", Empty, doc_list, True),
        ("team_doc_create", "Create a shared document (fails when it exists).", DocCreateInput, doc_create, True),
        ("resource_create", "Store content; returns its id (its sha256).", ResourceCreateInput, resource_create, True),
        ("resource_read", "Read a stored resource by id.", ResourceReadInput, resource_read, True),
        ("team_proposal_create", "Put a question to the team vote; every other agent is notified.",
         ProposalCreateInput, propose, False),
        ("team_proposal_vote", "Vote on an active proposal (again to change your vote).", VoteInput, vote, True),
        ("team_vote", "Vote on an active proposal (again to change your vote).", VoteInput, vote, True),
        ("team_proposal_status", "A proposal's votes and result (omit the id: every proposal).",
         ProposalInput, proposal_status, True),
        ("team_proposal_cancel", "Cancel a proposal you created.", CancelInput, cancel, True),
    ]
    return ToolBox((tool_from_model(name, desc, model, fn, group="team", retry_on_crash=safe)
                    for name, desc, model, fn, safe in tools), name="team")
