"""What a vendor's batch API is to the collectors: four calls, each safe to journal between.

A provider batch is made in steps that a crash can separate — upload the requests (OpenAI's input
file), create the batch, poll it, read its results — so :class:`BatchAPI` exposes each step on its
own, with the id it returns, and :meth:`BatchAPI.find` to re-attach to a batch whose creation was
sent but whose id was never recorded. The embedded collector (:mod:`.collector`) runs the steps in
one task; the pool journals each id in Redis before the next step, so a batch is never created
twice for one set of requests.

The vendors' shapes live in :mod:`shelly_dist.providers.batches`; nothing here knows one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from shelly_dist.models.usage import Usage, UsageTracker

if TYPE_CHECKING:  # annotations only: the config schema reads BATCH_KEY's prices without the chat types
    from shelly_dist.chats import Message
    from shelly_dist.models.completer import ToolSpec

SUCCEEDED = "succeeded"
ERRORED = "errored"
EXPIRED = "expired"
CANCELED = "canceled"
MISSING = "missing"
"""Outcome states of one request; ``missing``: the batch ended without a line for it."""

PROVIDER_BATCH = "provider_batch"
"""The ``kind`` of a model call's wait for a provider batch (``model_waiting`` events; on a pool the
run's ``RunState.model_wait``)."""

BATCH_KEY = "batch"
"""``Message.metadata`` key of a reply that came from a provider batch: ``{vendor, batch_id,
custom_id}``. Pricing reads it (batch price); the journal keeps it with the reply."""

DEFAULT_COLLECT_WINDOW = 0.5
DEFAULT_POLL_INTERVAL = 5.0
DEFAULT_TIMEOUT = 3600.0
DEFAULT_MAX_BATCH_SIZE = 100
"""Shelly's defaults (``batch.CollectorOpts.withDefaults``)."""


@dataclass(frozen=True)
class BatchSettings:
    """A provider's ``batch:`` block, defaults applied (seconds)."""

    collect_window: float = DEFAULT_COLLECT_WINDOW
    """How long the first request of a batch waits for others before the batch is submitted."""
    poll_interval: float = DEFAULT_POLL_INTERVAL
    timeout: float = DEFAULT_TIMEOUT
    """How long a submitted batch may take before its requests are made directly instead."""
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    """A batch is submitted as soon as it holds this many requests."""

    @classmethod
    def of(cls, collect_window: float | None = None, poll_interval: float | None = None,
           timeout: float | None = None, max_batch_size: int | None = None) -> BatchSettings:
        """Settings from the config's values, where ``None`` or ``<= 0`` means the default (as Go)."""
        return cls(
            collect_window=collect_window if collect_window and collect_window > 0 else DEFAULT_COLLECT_WINDOW,
            poll_interval=poll_interval if poll_interval and poll_interval > 0 else DEFAULT_POLL_INTERVAL,
            timeout=timeout if timeout and timeout > 0 else DEFAULT_TIMEOUT,
            max_batch_size=max_batch_size if max_batch_size and max_batch_size > 0 else DEFAULT_MAX_BATCH_SIZE,
        )


@dataclass
class Poll:
    """One look at a batch: the vendor's ``status`` word, whether it has ended (results, if any,
    can be read), its request counts, and the references the results are read through."""

    status: str
    ended: bool
    counts: dict[str, int] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    error: str = ""
    """Why a batch ended without running its requests (OpenAI's validation ``errors``), else ""."""


@dataclass
class Outcome:
    """The result of one request of a batch: a reply with its usage, or why there is none."""

    state: str
    reply: Message | None = None
    usage: Usage = field(default_factory=Usage)
    error: str = ""


class BatchAPI(Protocol):
    """One vendor's batch endpoints, for one provider (its key, base URL and model)."""

    vendor: str
    """``openai`` or ``anthropic``: the name events and the live view give the batch."""
    provider: str
    """The provider's config name."""
    usage: UsageTracker
    """The provider's usage total, which batch results are added to as direct calls are."""

    def encode(self, custom_id: str, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        """The batch line (or request item) of one model call; pure, JSON-serialisable."""
        ...

    async def upload(self, lines: list[dict[str, Any]]) -> str:
        """Upload the lines where the vendor needs a file first; its id, or "" when the lines go
        with :meth:`create` (Anthropic)."""
        ...

    async def create(self, lines: list[dict[str, Any]], upload: str) -> str:
        """Create the batch (from ``upload``, or from ``lines`` inline); the vendor's batch id."""
        ...

    async def find(self, upload: str, lines: list[dict[str, Any]], since: float) -> str | None:
        """The id of a batch created from ``upload`` (or holding ``lines``) at or after ``since``
        (epoch seconds), when a create was sent but its answer never recorded; ``None`` if none."""
        ...

    async def poll(self, batch_id: str) -> Poll:
        ...

    async def results(self, batch_id: str, poll: Poll) -> dict[str, Outcome]:
        """Every request's outcome by ``custom_id``, read once the batch has ended."""
        ...

    async def cancel(self, batch_id: str) -> None:
        ...
