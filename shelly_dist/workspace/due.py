"""The index of team schedules by due time, in memory or in Redis (one sorted set for every
session of a prefix): a ticker reads only what is due, so its cost follows the due work, not the
number of live teams (DESIGN §3 rule 17), and a claim moves a due member to its next time only if
nobody did since it was read, so each due time fires once across every worker. The Redis index is
``shelly_dist.workspace.redis.RedisDueIndex``."""

from __future__ import annotations

from typing import Protocol

WAKE_MARK = "!wake"
"""Ends the entry of a wake's check (:func:`wake_member`); no agent name has a ``!``."""


def member(session: str, agent: str) -> str:
    return f"{session}/{agent}"


def wake_member(session: str, agent: str) -> str:
    """The entry that checks, when due, that a wake asked for ``agent`` happened (the sweeper of
    ``runtime/schedules.py``): a wake whose send was refused or lost is sent again."""
    return f"{session}/{agent}{WAKE_MARK}"


def split(entry: str) -> tuple[str, str]:
    """(session, agent) of a schedule's or a wake check's entry."""
    session, _, agent = entry.partition("/")
    return session, agent.removesuffix(WAKE_MARK)


def is_wake_check(entry: str) -> bool:
    return entry.endswith(WAKE_MARK)


class DueIndex(Protocol):
    async def schedule(self, entry: str, at: float) -> None:
        """Put ``entry`` (see :func:`member`) due at ``at`` (epoch seconds)."""
        ...

    async def due(self, now: float, limit: int = 100) -> list[tuple[str, int]]:
        """Entries due at ``now``, with the score (ms) to claim them with."""
        ...

    async def claim(self, entry: str, score: int, next_at: float) -> bool:
        """Move ``entry`` from ``score`` to ``next_at``; False when someone else moved it first."""
        ...

    async def remove(self, entry: str) -> None: ...

    async def hint(self, entry: str, at: float) -> None:
        """Put ``entry`` due at ``at`` unless it is due earlier already."""
        ...

    async def drop(self, entry: str, score: int) -> bool:
        """Remove ``entry`` only if still at ``score`` (nobody hinted it since it was read)."""
        ...


class MemoryDueIndex:
    def __init__(self) -> None:
        self._due: dict[str, int] = {}

    async def schedule(self, entry: str, at: float) -> None:
        self._due[entry] = int(at * 1000)

    async def due(self, now: float, limit: int = 100) -> list[tuple[str, int]]:
        cutoff = int(now * 1000)
        return sorted(((e, s) for e, s in self._due.items() if s <= cutoff), key=lambda x: x[1])[:limit]

    async def claim(self, entry: str, score: int, next_at: float) -> bool:
        if self._due.get(entry) != score:
            return False
        self._due[entry] = int(next_at * 1000)
        return True

    async def remove(self, entry: str) -> None:
        self._due.pop(entry, None)

    async def hint(self, entry: str, at: float) -> None:
        self._due[entry] = min(self._due.get(entry, int(at * 1000)), int(at * 1000))

    async def drop(self, entry: str, score: int) -> bool:
        if self._due.get(entry) != score:
            return False
        del self._due[entry]
        return True
