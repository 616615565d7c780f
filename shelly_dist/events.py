"""Event records: what every layer reports about a run, and the sink they report it to.

Events are plain JSON-able records so the same value can go to an in-process bus, a Redis stream
read by another machine, or ``shelly events --json``. The kind strings are a public contract
(Shelly's names, plus the distributed runtime's): never derive them from code names.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

AGENT_START = "agent_start"
AGENT_END = "agent_end"
MESSAGE_ADDED = "message_added"
MESSAGE_DELTA = "message_delta"
"""A piece of a reply's text while the model writes it (only when a person watches the run);
``data.text``; ``data.begin`` marks the start of a streamed answer (again after a retry). The whole
reply still arrives as ``message_added``."""
TOOL_CALL_START = "tool_call_start"
TOOL_CALL_END = "tool_call_end"
DELEGATION_PROGRESS = "delegation_progress"
ERROR = "error"
ASK_USER = "ask_user"
APPROVAL_REQUESTED = "approval_requested"
"""A gated tool call waits for a person's verdict: ``data`` ``{id, tool, arguments, path, timeout}``."""
APPROVAL_DECIDED = "approval_decided"
"""A verdict reached the run: ``data`` ``{id, tool, call_id, decision, by, reason?, arguments?}``."""
STEERED = "steered"
"""A person's steering message joined the run's chat before its next model call: ``{text, by, interrupt}``."""
PROVIDER_RETRY = "provider_retry"
PROVIDER_FALLBACK = "provider_fallback"
RUN_QUEUED = "run_queued"
RUN_STARTED = "run_started"
RUN_WAITING = "run_waiting"
MODEL_WAITING = "model_waiting"
RUN_RESUMED = "run_resumed"
RUN_FINISHED = "run_finished"
RUN_SPAWNED = "run_spawned"
SPAWN_ANNOUNCED = "spawn_announced"
USAGE = "usage"
BATCH_SUBMITTED = "batch_submitted"
"""A model call joins a provider batch being submitted (Shelly's name; per waiting run)."""
BATCH_POLLING = "batch_polling"
"""The provider batch holding a run's model call was created: ``data.batch_id`` is the vendor's id."""
BATCH_COMPLETED = "batch_completed"
"""The provider batch holding a run's model call ended and its results were read."""
BATCH_FALLBACK = "batch_fallback"
"""A model call meant for a provider batch is made directly instead; ``data.reason`` says why."""
WARNING = "warning"
"""Something the user should know that did not stop the run; ``data.code`` says what."""
REPLY_TRUNCATED = "reply_truncated"
"""``warning`` code: the output limit (``max_tokens``) cut a reply; its tool calls were not run."""
WAKE_STARTED = "wake_started"
WAKE_FINISHED = "wake_finished"
WAKES_PAUSED = "wakes_paused"
"""A session's wakes stopped: over its wake budget or a loop between agents; ``data.reason``
says which (``runtime/wake.py``). A message from the user resumes them."""
CHANNEL_POST = "channel_post"
INBOX_ACK = "inbox_ack"


class Event(BaseModel):
    """One thing that happened. ``agent`` is the instance name; ``data`` depends on ``kind``."""

    kind: str
    agent: str = ""
    session_id: str = ""
    run_id: str = ""
    timestamp: float = Field(default_factory=time.time)
    data: dict[str, Any] = Field(default_factory=dict)


EventSink = Callable[[Event], None]
"""Receives events. It must not block: sinks run inline in the agent loop."""


def add_merging(buffer: list[Event], event: Event) -> None:
    """Append ``event`` to ``buffer``, a ``message_delta`` merged into a delta of the same run just
    before it (one event per write instead of one per token, where events are stored: the
    session's stream, an embedded session's log). A delta that begins a stream is never merged
    into the one before; ``buffer``'s last event is replaced, not changed: other sinks hold it."""
    last = buffer[-1] if buffer else None
    if (event.kind == MESSAGE_DELTA and last is not None and last.kind == MESSAGE_DELTA
            and last.run_id == event.run_id and last.agent == event.agent and not event.data.get("begin")):
        text = str(last.data.get("text") or "") + str(event.data.get("text") or "")
        buffer[-1] = last.model_copy(update={"data": {**last.data, "text": text}})
    else:
        buffer.append(event)


def discard(_event: Event) -> None:
    """The sink used when nobody listens."""
