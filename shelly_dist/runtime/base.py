"""What every runtime offers the engine: run a top-level agent to its end, in a session.

The engine builds the agent (from config) and hands it here; the runtime decides how that run's
delegations execute — as asyncio tasks (:class:`~shelly_dist.runtime.local.LocalRuntime`) or as
Celery tasks on a worker pool — and journals and reports what it must. Either way the caller gets
a :class:`RunOutcome` or an exception.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from shelly_dist.agent import Agent, CompletionResult
from shelly_dist.chats import Message
from shelly_dist.models import Usage


@dataclass
class RunOutcome:
    """How a top-level run ended: its final reply and what it cost — ``usage`` the top-level run's
    own calls, ``tree_usage`` those of every run of its tree (itself included)."""

    run_id: str
    reply: Message
    usage: Usage
    completion: CompletionResult | None = None
    tree_usage: Usage | None = None
    """``None`` from a runtime that does not total the tree (the caller then knows only ``usage``)."""


class Runtime(Protocol):
    """Executes top-level runs; a runtime is opened once and closed once."""

    name: str
    """``local`` or ``celery``: shown by the CLI."""

    async def execute(
        self, agent: Agent, messages: list[Message], *, session: str, run_id: str | None = None
    ) -> RunOutcome:
        """Append ``messages`` to ``agent``'s chat and run it to its end.

        Cancellation (Ctrl-C) propagates and cancels the whole run tree.
        """
        ...

    async def aclose(self) -> None:
        """Release connections; idempotent."""
        ...
