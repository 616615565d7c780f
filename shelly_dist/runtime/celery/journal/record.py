"""A run record (hash ``…:run:{id}``) parsed once, at the journal's edge, into a typed object.

The record holds the run's identity (agent, depth, parent, root, session), its status (``queued →
running ⇄ waiting → done | failed | canceled``), its state (a :class:`~shelly_dist.agent.RunState`
without messages) and how many messages its journal holds. Everything above the journal reads
these attributes; nothing passes the raw ``dict[str, str]`` around (STYLE "What to avoid" 11).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from shelly_dist.agent.children import Ending
from shelly_dist.runtime.celery.names import task_kwargs

if TYPE_CHECKING:
    from shelly_dist.agent import ChildRequest


class RunStatus(StrEnum):
    """Where a run stands: one of the three live states, or how it ended — the members of
    :class:`~shelly_dist.agent.children.Ending`, by value, so a run's status and its
    ``run_finished`` cannot drift apart. The same strings the journal's Lua scripts write and compare."""

    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    DONE = Ending.DONE.value
    FAILED = Ending.FAILED.value
    CANCELED = Ending.CANCELED.value

    @classmethod
    def read(cls, raw: str) -> RunStatus:
        """The status a record's field holds (a record without one is still ``queued``)."""
        return cls(raw or cls.QUEUED)

    @classmethod
    def ended(cls, ending: Ending) -> RunStatus:
        """The status of a run that ended so."""
        return cls(ending.value)


LIVE = frozenset({RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING})
"""The statuses of a run that has not ended."""

TERMINAL = frozenset(RunStatus.ended(e) for e in Ending)
"""The statuses a run never leaves (equal to their strings, so ``"done" in TERMINAL``)."""


def child_key(request: ChildRequest, iteration: int) -> str:
    """The field under which a child's entry joins its parent's children hash (unique per
    suspension: the parent's step and the delegation's call)."""
    return f"{iteration}:{request.key}"


@dataclass
class RunRecord:
    id: str
    agent: str
    root: str
    session: str
    depth: int = 0
    parent: str = ""
    parent_key: str = ""
    mode: str = "worker"
    """``worker`` (advanced by worker tasks) or ``coordinator`` (a root driven by a CLI process)."""
    status: RunStatus = RunStatus.QUEUED
    task: str = ""
    fingerprint: str = ""
    request: str = ""
    """The :class:`~shelly_dist.agent.ChildRequest` JSON of a child run."""
    input: str = ""
    """The first user messages (JSON) of a root run started on a worker."""
    state: str = ""
    msg_count: int = 0
    instance_n: int = 0
    pending: int = 0
    attempts: int = 0
    stop: str = ""
    """Why the run must stop (a failed sibling, under ``delegate_fail_fast``), as read with the record."""
    instance: str = ""
    """The instance name it ran as (``coder-fix-1``), once it ended."""
    worker: str = ""
    """The worker that claimed it last."""
    result: str = ""
    """Its entry (the delegate entry JSON), once it ended."""
    error: str = ""
    reply: str = ""
    """The final reply's text of a run that ended ``done``."""
    usage: str = ""
    """Its usage JSON, once it ended (a running run's is in its ``state``)."""
    handoff: str = ""
    """The run id of the peer it handed its delegation off to."""
    created: float = 0.0
    updated: float = 0.0
    canceled: bool = False
    """The tree's cancel flag (meaningful on a root's record)."""
    spawned: bool = False
    """Started by its parent's ``spawn`` (not joined by a ``delegate``)."""
    waiting_for: str = ""
    """What its suspended model call waits for (``openai batch batch_abc (37 requests)``, the
    provider key's budget); meaningful while it is ``waiting``."""

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL

    def spent(self) -> dict[str, Any]:
        """Its usage: the final one once it ended, else its last checkpoint's (``{}`` if none)."""
        if self.usage:
            return dict(json.loads(self.usage))
        return dict(json.loads(self.state or "{}").get("usage") or {})

    @classmethod
    def parse(cls, raw: dict[str, str]) -> RunRecord:
        """From the hash's fields (unknown fields are ignored; numbers default to 0)."""
        def num(name: str) -> int:
            return int(raw.get(name) or 0)

        return cls(
            id=raw["id"], agent=raw.get("agent", ""), root=raw.get("root") or raw["id"],
            session=raw.get("session", ""), depth=num("depth"), parent=raw.get("parent", ""),
            parent_key=raw.get("parent_key", ""), mode=raw.get("mode", "worker"),
            status=RunStatus.read(raw.get("status", "")),
            task=raw.get("task", ""), fingerprint=raw.get("fingerprint", ""), request=raw.get("request", ""),
            input=raw.get("input", ""), state=raw.get("state", ""), msg_count=num("msg_count"),
            instance_n=num("instance_n"), pending=num("pending"), attempts=num("attempts"), stop=raw.get("stop", ""),
            instance=raw.get("instance", ""), worker=raw.get("worker", ""), result=raw.get("result", ""),
            error=raw.get("error", ""), reply=raw.get("reply", ""), usage=raw.get("usage", ""),
            handoff=raw.get("handoff", ""), created=float(raw.get("created") or 0),
            updated=float(raw.get("updated") or 0), canceled=raw.get("canceled") == "1",
            spawned=raw.get("spawned") == "1", waiting_for=raw.get("waiting_for", ""),
        )

    def task_kwargs(self) -> dict[str, Any]:
        """What Flower shows of a run's task: agent, depth, session and a preview of the task."""
        return task_kwargs(self.agent, self.depth, self.session, self.task)
