"""A tool call whose result comes later: the run is suspended durably until it is delivered.

A handler raises :class:`SuspendCall` when its result cannot be produced in this process now —
``ask_user`` on a worker, where the answer comes from a person on another machine much later and
no worker slot may be held while waiting. The step machine records the call as awaiting (its
``payload`` journaled with the run) instead of a result, suspends the run like a delegation, and
continues once a runtime delivers the result (:meth:`shelly_dist.agent.Run.deliver_result`).
"""

from __future__ import annotations

from typing import Any


class SuspendCall(Exception):  # a control signal, not an error
    """Raised by a tool handler: suspend the run until this call's result is delivered.

    ``payload`` is journaled with the run and handed to the runtime (JSON-serialisable)."""

    def __init__(self, kind: str, payload: dict[str, Any]) -> None:
        super().__init__(f"{kind}: suspended until its result is delivered")
        self.kind = kind
        self.payload = payload
