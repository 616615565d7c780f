"""A gated tool call's approval and the verdict a person gives it.

An approval is asked the way ``ask_user`` asks a question: the engine's
:class:`~shelly_dist.tools.builtin.ask.Responder` numbers it (``a-N``, beside the questions'
``q-N``) and hands it to the same answerer — a terminal prompt, an in-process wait for
``Session.approve``, or, on a worker, a :class:`~shelly_dist.tools.suspend.SuspendCall` that
suspends the run durably until the verdict arrives from anywhere. The verdict travels on the same
answer channels as an answer's text, as JSON (:meth:`Verdict.to_text`), so every channel that
carries an answer carries a verdict unchanged; a terminal's ``yes``/``no``/``always`` is read by
:meth:`Verdict.parse` too.

What the model reads: an approved call's own result (with a note when a person edited its
arguments), a rejected one's ``<tool>: rejected: <reason>`` (an error result), and a call a
person interrupted ``skipped: the user interrupted``.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

QUESTION = "question"
"""The decision kind of an ``ask_user`` question (its suspension kind is ``ask_user``)."""
APPROVAL = "approval"
"""The decision kind, and suspension kind, of a gated tool call."""

APPROVAL_TIMED_OUT = "approval timed out"
"""The reason of a verdict nobody gave within the agent's ``approval.timeout``."""
NOBODY_APPROVES = (
    "nobody can approve: this run has no terminal and no decision channel; run it with `shelly run` on a "
    "terminal, on a worker pool (`shelly approve`), or open the engine without an answerer"
)
INTERRUPTED = "skipped: the user interrupted"
"""The result of a tool call a person's ``steer --interrupt`` stopped before it started."""
REJECTED_BY_DEFAULT = "the user rejected this call"

Decision = Literal["approve", "reject", "skip"]

APPROVE_WORDS = frozenset({"y", "yes", "approve", "approved", "allow", "ok", "always"})
REJECT_WORDS = frozenset({"n", "no", "reject", "rejected", "deny", "denied"})


def path_text(path: list[str]) -> str:
    """A run's path from its root as people read it: ``lead → deployer-1``."""
    return " → ".join(path)


class Approval(BaseModel):
    """What a gated call asks a person: may ``tool`` run with ``arguments`` (the JSON text the
    model wrote)? ``path`` names the asking run from its root's agent down (``lead → deployer-1``)."""

    model_config = ConfigDict(extra="ignore")

    id: str = ""
    tool: str
    arguments: str = "{}"
    path: list[str] = Field(default_factory=list)
    timeout: float = 0.0
    """Seconds to wait for a verdict (``approval.timeout``; 0: no limit)."""
    kind: Literal["approval"] = APPROVAL

    def parsed_arguments(self) -> Any:
        """The arguments as JSON (the raw text when the model wrote something else)."""
        try:
            return json.loads(self.arguments or "{}")
        except ValueError:
            return self.arguments

    def event_data(self) -> dict[str, Any]:
        """The ``approval_requested`` event's data (docs/events.md)."""
        return {"id": self.id, "tool": self.tool, "arguments": self.parsed_arguments(), "path": list(self.path),
                "timeout": self.timeout}

    def prompt(self) -> str:
        """One line for a terminal: who wants to run what."""
        who = path_text(self.path) or "an agent"
        return f"{who} wants to run {self.tool} {self.arguments}"


class Verdict(BaseModel):
    """A person's decision on one approval. ``arguments`` (JSON text) replaces the model's when
    approving; ``reason`` reaches the model when rejecting; ``by`` is a label of who decided
    (``cli:alice@host``, ``terminal``, ``timeout``; never a secret); ``always`` makes the decision
    stick for that tool in the session (or batch)."""

    decision: Decision
    arguments: str | None = None
    reason: str = ""
    by: str = ""
    always: bool = False
    id: str = ""
    """The decision it answers (``a-N``), when the one who asked stamps it."""

    def to_text(self) -> str:
        """The verdict as answer text (what an answer channel carries)."""
        return self.model_dump_json(exclude_defaults=True)

    @classmethod
    def parse(cls, text: str, *, by: str = "") -> Verdict:
        """A verdict from answer text: the JSON of :meth:`to_text`, or a person's words —
        ``yes``/``approve``/``always``, or ``no``/``reject`` optionally followed by the reason
        (``no, not on Fridays``). Anything else is a ``ValueError`` naming what was wrong."""
        stripped = text.strip()
        if stripped.startswith("{"):
            try:
                verdict = cls.model_validate_json(stripped)
            except ValidationError as exc:
                raise ValueError(f"not a verdict: {exc.errors()[0]['msg']}") from exc
            return verdict if verdict.by or not by else verdict.model_copy(update={"by": by})
        word, _, rest = stripped.replace(",", " ", 1).partition(" ")
        word = word.lower().rstrip(":")
        if word in APPROVE_WORDS:
            return cls(decision="approve", by=by, always=word == "always")
        if word in REJECT_WORDS:
            return cls(decision="reject", reason=rest.strip(), by=by)
        raise ValueError(f"answer approve (yes, always) or reject (no [reason]), not {text!r}")

    @classmethod
    def approve(cls, *, arguments: str | None = None, by: str = "", always: bool = False) -> Verdict:
        return cls(decision="approve", arguments=arguments, by=by, always=always)

    @classmethod
    def reject(cls, reason: str = "", *, by: str = "", always: bool = False) -> Verdict:
        return cls(decision="reject", reason=reason, by=by, always=always)


def timed_out() -> Verdict:
    """The verdict of an approval past its ``approval.timeout``: rejected."""
    return Verdict(decision="reject", reason=APPROVAL_TIMED_OUT, by="timeout")


def skipped(by: str = "") -> Verdict:
    """The verdict of an approval a person's ``steer --interrupt`` ended."""
    return Verdict(decision="skip", reason=INTERRUPTED, by=by)


def rejected_text(tool: str, reason: str) -> str:
    """The error result a rejected call gives the model."""
    return f"{tool}: rejected: {reason or REJECTED_BY_DEFAULT}"


def edited_note(arguments: str) -> str:
    """Put before an approved call's result when a person changed its arguments."""
    return f"[the user approved this call with edited arguments: {arguments}]\n"


def check_arguments(text: str) -> str:
    """``text`` if it is a JSON object (edited arguments), else a ``ValueError`` saying so."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"--args: not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError("--args: the arguments must be a JSON object")
    return json.dumps(value)
