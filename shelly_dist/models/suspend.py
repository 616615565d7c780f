"""A model call whose answer comes later: the run is suspended durably until it is due or delivered.

A completer layer raises :class:`SuspendModel` when the call cannot be answered in this process
now and waiting here would hold a worker: the provider governor when a key has no budget for a
while (the run comes back when it is ``due``), a vendor batch collector when the request joined a
batch (a reply is delivered later, from whichever process polls the batch). The step machine
(:meth:`shelly_dist.agent.Run.step`) journals the awaiting call as a :class:`ModelWait` and
suspends the run exactly as a delegation or an ``ask_user`` does: on a worker it holds no slot
while it waits; embedded, the same run waits in-process (:meth:`~shelly_dist.agent.Run.until_done`).

When the run comes back, either a reply was delivered for the wait (it is the call's answer; the
model is not asked) or the wait is due: the model call is made again, through the whole completer
stack, with the previous wait visible to it (:func:`model_call`), so a layer can continue what it
started (the governor keeps its place in the key's queue, a batch collector looks for the result
of the request it submitted instead of submitting it again).

Only a call made by the step machine may suspend (:attr:`ModelCall.can_suspend`): any other caller
of a completer (an effect summarising a chat, a team's coordinator) gets a layer that waits
in-process instead, since nothing would journal its suspension.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from shelly_dist.chats import Message, Role
from shelly_dist.errors import ModelError

__all__ = ["ModelCall", "ModelWait", "SuspendModel", "calling_model", "failed_reply", "model_call", "raise_if_failed"]

FAILED = "model_error"
"""``Message.metadata`` key of a delivered reply that is a failure: the call, made elsewhere (a
vendor batch's direct fallback, by the process polling it), failed after its retries."""


def failed_reply(error: ModelError) -> Message:
    """What is delivered for a suspended call that failed where it was made: no answer, the error."""
    reply = Message(role=Role.ASSISTANT, parts=[])
    reply.metadata[FAILED] = {"error": str(error), "provider": error.provider, "model": error.model}
    return reply


def raise_if_failed(reply: Message) -> None:
    """Raise the ``ModelError`` a delivered :func:`failed_reply` carries (the run then fails as if
    its own call had); nothing for a reply."""
    failure = reply.metadata.get(FAILED)
    if isinstance(failure, dict):
        raise ModelError(str(failure.get("error") or "model call failed"), provider=str(failure.get("provider") or ""),
                         model=str(failure.get("model") or ""))


class SuspendModel(Exception):  # a control signal, not an error: no retry or fallback catches it
    """Raised by a completer layer: suspend the run until ``due_at`` or until a reply is delivered.

    ``kind`` names the layer (``governor``, ``provider_batch``); ``payload`` is journaled with the
    run and handed back to the layer on the next attempt (JSON-serialisable); ``due_at`` is when
    the call should be made again (epoch seconds), ``None`` when only a delivered reply ends the
    wait. ``reason`` is what a person reads while the run waits (``the openai key: rpm``)."""

    control_signal = True
    """Not a failure of the call (metrics do not count it as one): nothing was sent."""

    def __init__(self, kind: str, payload: dict[str, Any], due_at: float | None, *, reason: str = "") -> None:
        when = "until a reply is delivered" if due_at is None else f"for {max(0.0, due_at - time.time()):.1f}s"
        super().__init__(f"{kind}: model call suspended {when}")
        self.kind = kind
        self.payload = payload
        self.due_at = due_at
        self.reason = reason


class ModelWait(BaseModel):
    """A run's suspended model call, journaled with the run (``RunState.model_wait``)."""

    id: str
    """Unique per suspension (``<run>:<iteration>:<n>``): a reply is delivered for this id, and a
    delivery for an earlier suspension of the same call is ignored."""
    kind: str
    payload: dict[str, Any] = Field(default_factory=dict)
    due_at: float | None = None
    """Epoch seconds at which the call is made again; ``None``: only a delivered reply ends it."""
    reason: str = ""
    reply: dict[str, Any] | None = None
    """The delivered reply (a ``Message`` as JSON, its usage in its metadata), once delivered."""

    def due(self, now: float | None = None) -> bool:
        """Whether the wait is over without a reply (its due time passed)."""
        return self.due_at is not None and (time.time() if now is None else now) >= self.due_at

    def over(self, now: float | None = None) -> bool:
        """Whether the run can go on: a reply was delivered, or the wait is due."""
        return self.reply is not None or self.due(now)

    @classmethod
    def of(cls, signal: SuspendModel, run_id: str, iteration: int, previous: ModelWait | None) -> ModelWait:
        n = int(previous.id.rsplit(":", 1)[1]) + 1 if previous is not None else 1
        return cls(id=f"{run_id}:{iteration}:{n}", kind=signal.kind, payload=dict(signal.payload),
                   due_at=signal.due_at, reason=signal.reason)


@dataclass(frozen=True)
class ModelCall:
    """What a completer layer may know about the call it serves (set by the step machine)."""

    can_suspend: bool = False
    """The caller journals a :class:`SuspendModel` (a run's model step); otherwise wait here."""
    previous: ModelWait | None = None
    """This call's last suspension, now over (due): the layer that raised it continues from it."""


_call: ContextVar[ModelCall | None] = ContextVar("shelly_model_call", default=None)
_OUTSIDE = ModelCall()


def model_call() -> ModelCall:
    """The model call being made in this context (a default one outside any run's step)."""
    return _call.get() or _OUTSIDE


@contextmanager
def calling_model(call: ModelCall) -> Iterator[None]:
    """Set :func:`model_call` for the body of the ``with`` (the step machine, around one call)."""
    token = _call.set(call)
    try:
        yield
    finally:
        _call.reset(token)
