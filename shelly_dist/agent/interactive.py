"""Shelly's interactive delegation: children ask, the parent's model answers.

With ``interaction_mode: interactive`` an agent may ``delegate`` with ``mode: interactive`` (one
such task makes the whole call interactive, as in Shelly). Every child then gets a delegation id
(``d-N``, numbered per parent run) and its ``request_input`` questions go to the parent instead of
the blocking auto-answer: the call returns once each child has either finished (its usual entry)
or asked (``{agent, delegation_id, pending_question: {id, agent, content}}``). The parent's model
answers with ``answer_delegation_questions`` (:func:`answer_tool`), which returns the same shape
once each answered child has asked again or finished. ``options.question_timeout`` bounds each
such wait: past it the child is cancelled and its entry says so (:func:`timeout_text`). Children
still waiting when the parent's run ends are cancelled.

This module is the contract both runtimes share: the tool, its input and errors, the numbering,
and what a round's entries do to the run's live delegations (:func:`settle`). Where the children
run and how an answer reaches them is the delegator's business (in-process:
:mod:`shelly_dist.runtime.local.interactive`; on the pool: ``runtime.celery.interactive``).
"""

from __future__ import annotations

from pydantic import BaseModel, Field, ValidationError

from shelly_dist.agent.interaction import REQUEST_INPUT, ChildQuestion
from shelly_dist.agent.records import ChildRequest, DelegateEntry, LiveDelegation, PendingDelegation, RunState
from shelly_dist.errors import DelegationRejected
from shelly_dist.tools import Tool
from shelly_dist.tools.suspend import SuspendCall

ANSWER_TOOL = "answer_delegation_questions"
INTERACTIVE = "interactive"

DESCRIPTION = (
    "Answer pending questions from interactive delegations. Provide answers for all pending questions. "
    "The tool blocks until every answered child either asks a follow-up question or completes."
)

SCHEMA = {
    "type": "object",
    "properties": {
        "answers": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "delegation_id": {"type": "string", "description": "The delegation ID from the pending question"},
                    "answer": {"type": "string", "description": "Your answer to the child's question"},
                },
                "required": ["delegation_id", "answer"],
            },
            "description": "List of answers to pending delegation questions",
        }
    },
    "required": ["answers"],
}

NOT_ENABLED = f"{ANSWER_TOOL}: interactive delegation not enabled"
REQUIRES_CONFIG = "delegate: interactive mode requires interaction_mode: interactive in config"

class AnswerEntry(BaseModel):
    delegation_id: str = ""
    answer: str = ""


class AnswerInput(BaseModel):
    answers: list[AnswerEntry] = Field(default_factory=list)


def answer_tool() -> Tool:
    """The tool's definition; its calls are executed by the run (they reach children), never by a
    handler."""

    async def not_called_directly(arguments: str) -> str:
        raise DelegationRejected(NOT_ENABLED)

    return Tool(ANSWER_TOOL, DESCRIPTION, SCHEMA, not_called_directly, group="agents")


def parse_answers(arguments: str) -> list[AnswerEntry]:
    try:
        return AnswerInput.model_validate_json(arguments or "{}").answers
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise DelegationRejected(f"{ANSWER_TOOL}: invalid input: {where}: {first['msg']}") from exc


def answered(state: RunState, answers: list[AnswerEntry], call_id: str) -> list[LiveDelegation]:
    """The live delegations ``answers`` go to, in order, each request re-indexed for this call
    (its join key unchanged). Every id is checked before any answer is sent, as in Shelly."""
    out = []
    for i, a in enumerate(answers):
        live = state.delegations.get(a.delegation_id)
        if live is None:
            raise DelegationRejected(f'{ANSWER_TOOL}: delegation "{a.delegation_id}" not found')
        out.append(live.model_copy(update={"request": live.request.model_copy(update={"index": i,
                                                                                       "tool_call_id": call_id})}))
    return out


def settle(state: RunState, pending: PendingDelegation) -> None:
    """After a round of an interactive call: a child that asked stays live (with where its answer
    goes), one that ended (finished, failed or timed out) is forgotten."""
    for request in pending.requests:
        entry = pending.entries[request.index]
        did = request.delegation_id
        if not did or entry is None:
            continue
        if entry.pending_question is not None:
            state.delegations[did] = LiveDelegation(request=request, reply_to=entry.reply_to or {})
        else:
            state.delegations.pop(did, None)


def question_entry(request: ChildRequest, question: ChildQuestion, reply_to: dict[str, str] | None = None
                   ) -> DelegateEntry:
    """The entry of a child that asked: its delegation id and its question."""
    return DelegateEntry.model_validate({
        "agent": request.agent, "delegation_id": request.delegation_id,
        "pending_question": question.model_dump(), "reply_to": reply_to,
    })


def go_duration(seconds: float) -> str:
    """``seconds`` as Go's ``time.Duration`` prints it (``100ms``, ``1.5s``, ``5m0s``, ``1h0m0s``)."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    if ns < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= size:
                return f"{ns / size:.9f}".rstrip("0").rstrip(".") + unit
    h, rest = divmod(ns, 3_600_000_000_000)
    m, rest = divmod(rest, 60_000_000_000)
    s = f"{rest / 1e9:.9f}".rstrip("0").rstrip(".") + "s"
    if h:
        return f"{h}h{m}m{s}"
    if m:
        return f"{m}m{s}"
    return s


def timeout_text(seconds: float, delegation_id: str) -> str:
    """The entry error of a child that neither asked nor finished within ``question_timeout``."""
    return f"question timeout ({go_duration(seconds)}) exceeded for delegation {delegation_id}"


async def suspend_question(question: ChildQuestion) -> str:
    """An interactive child's ``request_input`` where it waits in a journal: the run suspends
    durably until its parent's answer is delivered (no worker held meanwhile)."""
    raise SuspendCall(REQUEST_INPUT, {"question": question.model_dump()})
