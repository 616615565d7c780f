"""Reflections (Shelly's §1.6.8): a note written when a delegated child fails, and the relevant
notes of earlier failures shown to the next child given a similar task.

The delegating run writes one markdown note per child that ends with a ``failed`` completion (its
own ``task_complete`` or the synthetic one of an exhausted budget), and, before it hands out a
task, searches the notes newest first for ones relevant to it: those sharing at least two words
of four or more characters with the task, at most five notes or 32 KB. They reach the child as a
``<prior_reflections>`` user message before its task, as in Go. The search is done once, when the
delegation is planned, and journaled with the child's request, so the child sees the same notes on
whichever worker it is built.

Where the notes live is the engine's choice (:class:`ReflectionStore`): files in the state
directory when embedded, Redis when the runs are spread over workers. Both are best effort, as in
Go: a store that fails never fails the delegation.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Protocol

from shelly_dist.agent.records import CompletionResult

logger = logging.getLogger(__name__)

MAX_FILES = 5
MAX_BYTES = 32 * 1024
SCANNED = 100
"""How many of the newest notes a search reads (Go reads the whole directory)."""

PRIOR_HEADER = "\n<prior_reflections>\nPrevious attempts at similar tasks failed. Learn from these reflections:\n\n"


class ReflectionStore(Protocol):
    """Where reflection notes are kept: ``add`` a note under a file name, read the newest."""

    async def add(self, name: str, text: str) -> None: ...

    async def newest(self, limit: int) -> list[str]:
        """Up to ``limit`` notes, newest first."""
        ...


class MemoryReflectionStore:
    """A list: for tests and runs with nowhere to write."""

    def __init__(self) -> None:
        self.notes: list[tuple[str, str]] = []

    async def add(self, name: str, text: str) -> None:
        self.notes.append((name, text))

    async def newest(self, limit: int) -> list[str]:
        return [text for _, text in reversed(self.notes)][:limit]


def sanitize(name: str) -> str:
    """Go's ``agentctx.SanitizeFilename``: every character outside ``[A-Za-z0-9_-]`` becomes ``-``."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", name)


def render(agent: str, task: str, completion: CompletionResult, now: datetime | None = None) -> tuple[str, str]:
    """The note of a failed child as Go's ``writeReflection`` writes it: (file name, markdown)."""
    now = now or datetime.now(UTC)
    lines = [f"# Reflection: {agent}\n\n", f"**Timestamp**: {now.strftime('%Y-%m-%dT%H:%M:%SZ')}\n\n",
             f"## Task\n{task}\n\n", f"## Summary\n{completion.summary}\n\n"]
    if completion.caveats:
        lines.append(f"## Caveats\n{completion.caveats}\n\n")
    if completion.files_modified:
        lines.append("## Files Modified\n" + "".join(f"- {f}\n" for f in completion.files_modified) + "\n")
    return sanitize(f"{agent}-{now.strftime('%Y%m%d-%H%M%S')}") + ".md", "".join(lines)


def relevant(task: str, content: str) -> bool:
    """Go's ``containsRelevantKeywords``: ≥ 2 of the task's words of ≥ 4 characters occur in it."""
    lowered = content.lower()
    return sum(1 for w in task.lower().split() if len(w) >= 4 and w in lowered) >= 2


def prior_reflections(task: str, notes: Sequence[str]) -> str:
    """The ``<prior_reflections>`` message for ``task`` from ``notes`` (newest first); "" if none
    is relevant."""
    chosen: list[str] = []
    size = 0
    for note in notes:
        if relevant(task, note):
            chosen.append(note)
            size += len(note.encode())
            if len(chosen) >= MAX_FILES or size >= MAX_BYTES:
                break
    if not chosen:
        return ""
    return PRIOR_HEADER + "".join(f"{note}\n---\n" for note in chosen) + "</prior_reflections>"


async def search(store: ReflectionStore, task: str) -> str:
    """The ``<prior_reflections>`` message for a child about to get ``task`` ("" if none; a store
    that fails is logged and gives none)."""
    return (await search_all(store, [task]))[0]


async def search_all(store: ReflectionStore, tasks: Sequence[str]) -> list[str]:
    """:func:`search` for each of the children of one ``delegate`` call, reading the store once
    (a 500-way fan-out costs one read, not 500)."""
    try:
        notes = await store.newest(SCANNED)
    except Exception as exc:
        logger.warning("reflections: search failed, delegating without: %s", exc)
        return ["" for _ in tasks]
    return [prior_reflections(task, notes) for task in tasks]


async def write(store: ReflectionStore, agent: str, task: str, completion: CompletionResult | None) -> None:
    """Keep the note of a child that failed (nothing for any other outcome; a failing store is logged)."""
    if completion is None or completion.status != "failed":
        return
    name, text = render(agent, task, completion)
    try:
        await store.add(name, text)
    except Exception as exc:
        logger.warning("reflections: writing %s failed: %s", name, exc)
