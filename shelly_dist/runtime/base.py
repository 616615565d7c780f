"""What every runtime offers the engine: run a top-level agent to its end, in a session.

The engine builds the agent (from config) and hands it here; the runtime decides how that run's
delegations execute — as asyncio tasks (:class:`~shelly_dist.runtime.local.LocalRuntime`) or as
Celery tasks on a worker pool — and journals and reports what it must. Either way the caller gets
a :class:`RunOutcome` or an exception.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from shelly_dist.agent import Agent, CompletionResult
from shelly_dist.chats import Message
from shelly_dist.errors import UsageError
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


RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""What a caller-chosen run id may be: Redis keys are built from it (a ``:`` in ``a:b`` made its keys
collide with another run's, braces would pick another hash slot), and it is a file name embedded."""


def check_run_id(run_id: str, origin: str) -> str:
    """``run_id`` when a caller may name a run so, else a ``UsageError`` naming ``origin`` and why."""
    if not RUN_ID.fullmatch(run_id):
        raise UsageError(f"{origin}: run id {run_id!r} may hold only letters, digits, '.', '_' and '-' "
                         "(starting with a letter or digit, at most 128)")
    return run_id
