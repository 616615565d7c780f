"""Shelly's ``request_input``: a delegated child asks its parent a question and waits for the answer.

Every delegated child (and every handoff peer) gets the tool. Who answers is the runtime's choice,
given as ``AgentOptions.request_input`` when it spawns the child: in blocking delegation the answer
is drawn from the delegation's context (:func:`auto_answer`, Shelly's text), or from the handoff's
context for a peer. The same answer is given embedded and on a worker, since both build it from
the child's request. In interactive delegation the parent's model answers
(:mod:`shelly_dist.agent.interactive`).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Awaitable, Callable

from pydantic import BaseModel, Field

from shelly_dist.errors import ToolError
from shelly_dist.tools import Tool
from shelly_dist.tools.schema import shared_schema
from shelly_dist.tools.tool import parse_input

REQUEST_INPUT = "request_input"

DESCRIPTION = (
    "Ask the parent agent or orchestrator a question and wait for a response. Use this when you need "
    "clarification, a decision, or information that only the parent context can provide."
)


class ChildQuestion(BaseModel):
    """A child's question to its parent (Shelly's ``Question``: ``{id, agent, content}``)."""

    id: str
    agent: str
    content: str


Answer = Callable[[ChildQuestion], Awaitable[str]]
"""Answers one ``request_input`` question (set by the runtime that spawned the child)."""


class RequestInputInput(BaseModel):
    question: str = Field("", description="The question to ask the parent")


def request_input_tool(
    agent_name: Callable[[], str], answer: Answer, next_id: Callable[[], int] | None = None
) -> Tool:
    """The tool of one child: questions numbered ``q-1``, ``q-2``… per child (``next_id``: a run
    passes its journaled counter, so the numbering survives a rebuild), sent to ``answer``."""
    ids = itertools.count(1)
    number = next_id or (lambda: next(ids))

    async def handler(arguments: str) -> str:
        data = parse_input(REQUEST_INPUT, RequestInputInput, arguments)
        if not data.question:
            raise ToolError(f"{REQUEST_INPUT}: question is required", tool=REQUEST_INPUT)
        return await answer(ChildQuestion(id=f"q-{number()}", agent=agent_name(), content=data.question))

    schema = shared_schema(RequestInputInput, required=("question",))
    return Tool(REQUEST_INPUT, DESCRIPTION, schema, handler, group="agents", retry_on_crash=True)


def go_quote(text: str) -> str:
    """``text`` quoted as Go's ``%q`` prints it (a double-quoted string with escapes)."""
    return json.dumps(text, ensure_ascii=False)


def auto_answer(context: str) -> Answer:
    """Blocking delegation's answer: the delegation (or handoff) context, as Shelly words it."""

    async def answer(question: ChildQuestion) -> str:
        return f"Based on the delegation context for your question {go_quote(question.content)}:\n\n{context}"

    return answer
