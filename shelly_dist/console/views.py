"""What the console's API answers, the same from both backends: a session, a run of its tree, a
message of a run's chat. Plain records built by a backend, turned into JSON here only.

The JSON shapes are documented in docs/reference.md ("shelly serve"); the field names follow
``shelly runs --json`` where both show the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shelly_dist.runtime.spending import Spent, spent_by_run

ENDED = frozenset({"done", "failed", "canceled"})
"""The statuses a run never leaves (the pool's ``RunStatus`` terminal values, as strings)."""


@dataclass
class RunView:
    """One run of a session's tree, as either backend knows it."""

    id: str
    agent: str
    parent: str = ""
    root: str = ""
    depth: int = 0
    instance: str = ""
    status: str = "queued"
    worker: str = ""
    task: str = ""
    error: str = ""
    handoff: str = ""
    spawned: bool = False
    created: float = 0.0
    ended: float | None = None
    usage: Mapping[str, Any] = field(default_factory=dict)
    """Its own usage so far (a :class:`~shelly_dist.models.Usage` as JSON)."""
    reply: str = ""
    """The final reply's text, once it ended ``done``."""


def run_rows(runs: list[RunView]) -> list[dict[str, Any]]:
    """The ``/api/sessions/{id}/runs`` rows: each run with its own and its subtree's spending."""
    spent = spent_by_run((r.id, r.parent, r.usage) for r in runs)
    return [{
        "id": r.id, "parent": r.parent, "root": r.root or r.id, "depth": r.depth, "agent": r.agent,
        "instance": r.instance, "status": r.status, "worker": r.worker, "task": r.task[:200], "error": r.error,
        "handoff": r.handoff, "spawned": r.spawned, "created": r.created, "ended": r.ended,
        "own": spent[r.id][0].to_json(), "tree": spent[r.id][1].to_json(),
    } for r in runs]


@dataclass
class SessionView:
    """A session as the console lists it: what its top-level runs (roots) say."""

    id: str
    roots: list[RunView]
    """Its root runs, oldest first (a session continued with ``--session`` has several)."""
    spent: Spent = field(default_factory=Spent)
    """What its trees spent (the runs that reported so far)."""

    @property
    def status(self) -> str:
        """The status of its first root still going, else its last root's."""
        live = [r for r in self.roots if r.status not in ENDED]
        return (live[0] if live else self.roots[-1]).status

    def to_json(self, *, detail: bool = False) -> dict[str, Any]:
        first, last = self.roots[0], self.roots[-1]
        ended = None if any(r.status not in ENDED for r in self.roots) else max(r.ended or 0.0 for r in self.roots)
        out: dict[str, Any] = {"id": self.id, "agent": last.agent, "task": first.task[:200], "status": self.status,
                               "created": first.created, "ended": ended, "roots": len(self.roots),
                               "tree": self.spent.to_json()}
        if detail:
            out.update(root_runs=[r.id for r in self.roots], reply=last.reply if last.status == "done" else "",
                       error=last.error)
        return out


def chat_json(run: RunView, messages: list[dict[str, Any]], *, complete: bool) -> dict[str, Any]:
    """The ``/api/runs/{id}/chat`` answer: the run's row and its messages in order (``complete``:
    whole messages from the journal, else rebuilt from events, texts cut as the events cut them)."""
    return {"run": run_rows([run])[0], "messages": messages, "complete": complete}
