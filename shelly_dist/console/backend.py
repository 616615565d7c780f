"""Where the console's answers come from: the pool's Redis, or this process's own engine.

Two backends answer the same questions in the same shapes (:mod:`.views`):

- :class:`~shelly_dist.console.pool.PoolBackend` when a broker is configured: everything is read
  from Redis (journals, the session index, the event streams) and a new session is a root run
  submitted to the workers. It keeps no state of its own, so any number of replicas behind one
  load balancer answer alike.
- :class:`~shelly_dist.console.local.LocalBackend` without one: sessions run in this process's
  engine and what the console shows is kept in memory (bounded), rebuilt from the engine's events.

Event ids are opaque strings a client hands back as ``Last-Event-ID`` to resume after that event.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from shelly_dist.console.views import RunView, SessionView
from shelly_dist.events import Event


@dataclass(frozen=True)
class Page:
    """One page of the session list, newest first; ``next`` is the cursor of the next page."""

    sessions: list[SessionView]
    next: str | None


class Backend(Protocol):
    """What the routes ask of a backend; ``None`` answers mean "no such session or run"."""

    name: str
    """``pool`` or ``in-process``."""

    async def start(self, task: str, *, agent: str | None, context: str) -> tuple[str, str]:
        """Start ``agent`` (default: the entry agent) on ``task`` in a new session; returns
        ``(session, root run id)`` once it is recorded (it runs on without the caller). An unknown
        agent is a ``UsageError``."""
        ...

    async def sessions(self, *, limit: int, cursor: str | None) -> Page: ...

    async def session(self, session: str) -> SessionView | None: ...

    async def runs(self, session: str) -> list[RunView] | None:
        """Every run of the session's trees, roots first, then by depth and creation."""
        ...

    async def chat(self, run_id: str) -> tuple[RunView, list[dict[str, Any]], bool] | None:
        """The run, its messages in order, and whether they are whole (see :func:`.views.chat_json`)."""
        ...

    async def cancel(self, session: str) -> list[str] | None:
        """Cancel every tree of the session; the ids of the roots cancelled."""
        ...

    def events(self, session: str | None, after: str | None) -> AsyncIterator[tuple[str, Event]]:
        """``(id, event)`` of ``session`` (``None``: of every session) after the event ``after``
        (``None``: a session's from its first event, all sessions' from now on), following new
        ones until the caller stops iterating. A malformed ``after`` is a ``UsageError`` raised by
        this call, before any event is read."""
        ...

    async def health(self) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...
