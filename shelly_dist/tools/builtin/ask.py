"""Shelly's ``ask`` toolbox: ``ask_user``, a question the agent puts to the user.

The tool keeps Shelly's contract: input ``{question, options?, header?, multiSelect?,
maxSelections?}``, question ids ``q-1``, ``q-2``… per :class:`Responder`, an ``ask_user``
notification carrying ``{id, text, options?, header?, multiSelect?, maxSelections?}`` before the
wait, and the answer text as the result. Who answers is not decided here: the responder hands
every question to an :class:`Answerer` the runtime supplies. ``shelly run`` on a terminal gives a
prompt on that terminal; a runtime that can suspend a run durably can give one that waits on
Redis. Without any, :class:`NoAnswerer` makes the call an error result that says how to get one,
so a headless run never hangs on a question nobody will see. On a worker,
:class:`SuspendingAnswerer` suspends the asking run durably instead (no worker slot held while it
waits): the runtime numbers the question in Redis, announces it and resumes the run with the
answer (``shelly_dist.runtime.celery.children.questions``).

``options.question_timeout`` bounds the wait: past it the call is an error result.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from shelly_dist.errors import ToolError
from shelly_dist.tools.schema import shared_schema
from shelly_dist.tools.suspend import SuspendCall
from shelly_dist.tools.tool import Tool, parse_input
from shelly_dist.tools.toolbox import ToolBox

ASK_USER = "ask_user"

NO_ANSWER_CHANNEL = (
    "nobody can answer: this run has no terminal and no answer channel; run it with "
    "`shelly run TASK` on a terminal, or open the engine with an answerer "
    "(Engine.open(..., answerer=...))"
)


class Question(BaseModel):
    """A question as Shelly's ``ask_user`` event carries it (JSON names kept)."""

    model_config = ConfigDict(populate_by_name=True)

    id: str
    text: str
    options: list[str] = Field(default_factory=list)
    header: str = ""
    multi_select: bool = Field(False, alias="multiSelect")
    max_selections: int = Field(0, alias="maxSelections")
    timeout: float = Field(0.0, exclude=True)
    """Seconds the asker waits (``options.question_timeout``; 0: no limit). Not part of the event."""

    def event_data(self) -> dict[str, object]:
        """The notification's data: Shelly's field names, empty fields left out."""
        return self.model_dump(by_alias=True, exclude_defaults=True) | {"id": self.id, "text": self.text}


def timeout_error(question_id: str, limit: float) -> str:
    """The error result of a question nobody answered within ``options.question_timeout``."""
    return f"{ASK_USER}: no answer to {question_id} within {limit:g}s (options.question_timeout)"


class Answerer(Protocol):
    """Gets the user's answer to one question. Raising ``ToolError`` makes the call an error."""

    async def answer(self, question: Question) -> str: ...


class SuspendingAnswerer:
    """The answerer of a worker: the asking run suspends durably until someone answers.

    It raises :class:`SuspendCall` with the question; the step machine journals the call as
    awaiting and the runtime numbers, announces and routes the question (so ``announces``: the
    :class:`Responder` neither numbers it for good nor announces it)."""

    announces = True

    async def answer(self, question: Question) -> str:
        raise SuspendCall(ASK_USER, question.model_dump(by_alias=True) | {"timeout": question.timeout})


class NoAnswerer:
    """The answerer of a run nobody can answer: every question is an error saying why."""

    def __init__(self, reason: str = NO_ANSWER_CHANNEL) -> None:
        self.reason = reason

    async def answer(self, question: Question) -> str:
        raise ToolError(f"{ASK_USER}: {self.reason}", tool=ASK_USER)


class AskInput(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    question: str = Field(description="The question to ask the user")
    options: list[str] = Field(
        default_factory=list, description="Optional list of choices for the user to select from"
    )
    header: str = Field("", description="Short tab label for the question (single word, e.g. Auth, Style)")
    multi_select: bool = Field(
        False,
        alias="multiSelect",
        description="When true the user can select multiple options (checkboxes). Defaults to false (single choice).",
    )
    max_selections: int = Field(
        0,
        alias="maxSelections",
        description="Maximum number of options the user can select in multi-select mode (0 = unlimited).",
    )


DESCRIPTION = (
    "Ask the user a question. Optionally provide multiple-choice options. "
    "The user may select an option or provide a custom response."
)


class Responder:
    """Numbers questions, announces them through ``on_ask``, and waits for the answerer.

    One responder serves an engine, so ids are unique across its agents (Shelly: one per engine).
    """

    def __init__(self, answerer: Answerer | None = None, on_ask: Callable[[Question], None] | None = None) -> None:
        self.answerer: Answerer = answerer or NoAnswerer()
        self.on_ask = on_ask
        self._ids = itertools.count(1)

    async def ask(self, question: Question, limit: float | None = None) -> str:
        """The answer to ``question`` (its ``id`` is assigned here), waiting at most ``limit``
        seconds (``None`` or 0: no limit)."""
        if not question.text:
            raise ToolError(f"{ASK_USER}: ask: question is required", tool=ASK_USER)
        question = question.model_copy(update={"id": f"q-{next(self._ids)}", "timeout": limit or 0.0})
        durable = getattr(self.answerer, "announces", False)
        if self.on_ask is not None and not durable:
            self.on_ask(question)
        if not limit or durable:  # a durable answerer numbers the question and keeps its deadline itself
            return await self.answerer.answer(question)
        try:
            async with asyncio.timeout(limit):
                return await self.answerer.answer(question)
        except TimeoutError:
            raise ToolError(timeout_error(question.id, limit), tool=ASK_USER) from None

    def toolbox(self, limit: float | None = None) -> ToolBox:
        """The ``ask`` toolbox (``ask_user``), waiting at most ``limit`` seconds for answers."""

        async def handler(arguments: str) -> str:
            inp = parse_input(ASK_USER, AskInput, arguments)
            question = Question(
                id="",
                text=inp.question,
                options=inp.options,
                header=inp.header,
                multi_select=inp.multi_select,
                max_selections=inp.max_selections,
            )
            return await self.ask(question, limit)

        # Asking again after a crash is harmless (the durable path dedups by call id anyway).
        tool = Tool(ASK_USER, DESCRIPTION, shared_schema(AskInput), handler, group="ask", retry_on_crash=True)
        return ToolBox([tool], name="ask")
