"""The prompt of one wake: independent sections, each built from the workspace alone.

A wake is one run of an agent (DESIGN §7): it reads its inbox, the recent channel and the
document, works, and exits; its continuity lives in these artifacts, so the prompt is rebuilt from
them on every wake. Each section is a small function so a workflow can drop or replace one.
"""

from __future__ import annotations

import time

from shelly_dist.workspace.base import DEFAULT_DOCUMENT, RECENT, WorkspaceBase
from shelly_dist.workspace.models import ChannelMessage, InboxEntry

WORKFLOW = """## Workflow
1. Read: your inbox above, then the channel and the document if you need more (channel_read, team_doc_read).
2. Work: do what the messages ask, with your tools.
3. Answer: your final text is posted to the channel for you; write results to the document when they are long.
4. Exit: your inbox is acked when you finish; do not wait for replies (a reply wakes you again)."""

STOP_RULES = """## Stop rules
- No pleasantries, thanks or acknowledgements: post only what moves the work forward.
- Do not @mention anyone in your final message unless you need more work from them: a mention wakes them.
- When there is nothing to do, answer with an empty message or one short line."""


def clock(timestamp: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(timestamp))


def inbox_line(entry: InboxEntry) -> str:
    """``- [hh:mm:ss] From @x [HIGH] [DM]: …`` (agent-worker's inbox line)."""
    m = entry.message
    flags = (" [HIGH]" if entry.priority == "high" else "") + (" [DM]" if m.to else "")
    return f"- [{clock(m.timestamp)}] From @{m.sender}{flags}: {m.content}"


def channel_line(message: ChannelMessage) -> str:
    to = f" → @{message.to}" if message.to else ""
    return f"- [{clock(message.timestamp)}] #{message.id} @{message.sender}{to}: {message.content}"


def project_section(agent: str, project: str) -> str:
    head = f"## Project\nYou are @{agent}, a member of a team that talks through a shared channel."
    return f"{head}\n{project.strip()}" if project.strip() else head


def inbox_section(inbox: list[InboxEntry]) -> str:
    return f"## Inbox ({len(inbox)} new)\n" + "\n".join(inbox_line(e) for e in inbox)


def channel_section(recent: list[ChannelMessage]) -> str:
    if not recent:
        return "## Recent channel\n(empty)"
    return f"## Recent channel (last {len(recent)})\n" + "\n".join(channel_line(m) for m in recent)


DOCUMENT_IN_PROMPT = 20_000
"""Characters of the document a wake prompt holds; the rest is read with ``team_doc_read``."""


def document_section(name: str, text: str) -> str:
    if len(text) > DOCUMENT_IN_PROMPT:
        return (f"## Document {name} (its first {DOCUMENT_IN_PROMPT:,} of {len(text):,} characters; "
                f"team_doc_read reads it whole)\n" + text[:DOCUMENT_IN_PROMPT])
    return f"## Document {name}\n" + (text if text.strip() else "(empty)")


def retry_section(attempt: int, attempts: int, error: str) -> str:
    if attempt <= 1:
        return ""
    return (f"## Retry\nThis is attempt {attempt} of {attempts}: the previous attempt failed"
            + (f" ({error})" if error else "") + ". Check the channel for anything it already posted.")


async def wake_prompt(
    ws: WorkspaceBase, agent: str, inbox: list[InboxEntry], *, project: str = "", attempt: int = 1,
    attempts: int = 3, error: str = "", document: str = DEFAULT_DOCUMENT,
) -> str:
    """The whole prompt of a wake of ``agent`` for ``inbox``."""
    recent = await ws.read(agent, limit=RECENT)
    text = await ws.doc_read(document) if document == DEFAULT_DOCUMENT or document in await ws.doc_list() else ""
    project = "\n".join(t for t in (project.strip(), (await ws.agent_prompt(agent)).strip()) if t)
    sections = [project_section(agent, project), inbox_section(inbox), channel_section(recent),
                document_section(document, text), retry_section(attempt, attempts, error), WORKFLOW, STOP_RULES]
    return "\n\n".join(s for s in sections if s)
