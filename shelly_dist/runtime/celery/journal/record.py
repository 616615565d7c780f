"""A run record (hash ``…:run:{id}``) parsed once, at the journal's edge, into a typed object.

The record holds the run's identity (agent, depth, parent, root, session), its status (``queued →
running ⇄ waiting → done | failed | canceled``), its state (a :class:`~shelly_dist.agent.RunState`
without messages) and how many messages its journal holds. Everything above the journal reads
these attributes; nothing passes the raw ``dict[str, str]`` around (STYLE "What to avoid" 11).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from shelly_dist.agent.children import Ending
from shelly_dist.agent.records import RunState
from shelly_dist.models import Usage
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
        """The status of a run that ended so (an ending's string too: ``Ending`` is one)."""
        return cls(Ending(ending).value)


LIVE = frozenset({RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING})
"""The statuses of a run that has not ended."""

TERMINAL = frozenset(RunStatus.ended(e) for e in Ending)
"""The statuses a run never leaves (equal to their strings, so ``"done" in TERMINAL``)."""


@dataclass(frozen=True)
class RunEnd:
    """What a run's end writes besides its status and result (``scripts.FINISH``,
    ``control_scripts.HANDOFF``): its own usage, the instance name it ran as, the reply it gave and
    the error it ended with — the one place the names of these fields are chosen. Passed to the
    scripts as one JSON object (a field left empty is not written)."""

    usage: str = ""
    instance: str = ""
    reply: str = ""
    error: str = ""

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v})


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
    steer: int = 0
    """How many steering messages its inbox holds (``shelly steer``), as read with the record."""
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
    priority: str = ""
    """A root's priority at its providers (``batch`` for a ``shelly batch`` item; "" interactive)."""
    share: str = ""
    """A root's fair-share group at its providers (its batch's identity; "" its own id)."""
    waiting_for: str = ""
    """What its suspended model call waits for (``openai batch batch_abc (37 requests)``, the
    provider key's budget); meaningful while it is ``waiting``."""
    owner: str = ""
    """The token of the process that owns a coordinator's root (only it writes the record)."""

    TASK_LIMIT: ClassVar[int] = 2000
    """Characters of a run's task kept in its record (Flower's preview, ``shelly runs``)."""

    @classmethod
    def new(cls, run_id: str, *, agent: str, root: str, session: str, task: str, fingerprint: str,
            depth: int = 0, parent: str = "", parent_key: str = "", mode: str = "worker",
            status: RunStatus = RunStatus.QUEUED, request: ChildRequest | None = None, input: str = "",
            spawned: bool = False, owner: str = "", priority: str = "", share: str = "",
            now: float | None = None) -> RunRecord:
        """A run as it is first written — a root, a delegated, spawned or handed-off child: the one
        place its creation fields are chosen (:meth:`fields` writes them)."""
        now = time.time() if now is None else now
        return cls(id=run_id, agent=agent, root=root, session=session, depth=depth, parent=parent,
                   parent_key=parent_key, mode=mode, status=status, task=task[:cls.TASK_LIMIT],
                   fingerprint=fingerprint, request=request.model_dump_json() if request is not None else "",
                   input=input, created=now, updated=now, spawned=spawned, owner=owner, priority=priority,
                   share=share)

    @staticmethod
    def canceled_fields(error: str, *, at: float | None = None) -> dict[str, str]:
        """The fields a cancel writes on a run no task advances (``control_scripts.CANCEL``):
        status ``canceled`` and why, and when it ended when ``at`` is given."""
        out = {"status": str(RunStatus.CANCELED), "error": error}
        if at is not None:
            out["updated"] = out["ended"] = str(at)
        return out

    def fields(self) -> dict[str, str]:
        """The hash fields a new record is written with: its identity, status, task and counters
        always; its request, input, owner, providers' class and share and the spawned flag only when
        set (a record without them reads them as empty, :meth:`parse`)."""
        out = {
            "id": self.id, "agent": self.agent, "depth": str(self.depth), "parent": self.parent,
            "parent_key": self.parent_key, "root": self.root, "session": self.session, "mode": self.mode,
            "status": str(self.status), "task": self.task, "fingerprint": self.fingerprint,
            "created": str(self.created), "updated": str(self.updated), "pending": str(self.pending),
            "attempts": str(self.attempts), "msg_count": str(self.msg_count),
        }
        optional = {"request": self.request, "input": self.input, "owner": self.owner,
                    "priority": self.priority, "share": self.share, "spawned": "1" if self.spawned else ""}
        out.update({k: v for k, v in optional.items() if v})
        return out

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL

    def spent(self) -> dict[str, Any]:
        """Its usage: the final one once it ended, else its last checkpoint's (``{}`` if none)."""
        if self.usage:
            return dict(json.loads(self.usage))
        return dict(json.loads(self.state or "{}").get("usage") or {})

    def tree_spent(self) -> Usage:
        """What the run and every run it delegated spent, as its last journaled state totals it
        (``RunState.tree_usage``, the one place a tree's usage is summed; zero before its first
        checkpoint)."""
        return RunState.model_validate_json(self.state).tree_usage if self.state else Usage()

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
            steer=num("steer"),
            instance=raw.get("instance", ""), worker=raw.get("worker", ""), result=raw.get("result", ""),
            error=raw.get("error", ""), reply=raw.get("reply", ""), usage=raw.get("usage", ""),
            handoff=raw.get("handoff", ""), created=float(raw.get("created") or 0),
            updated=float(raw.get("updated") or 0), canceled=raw.get("canceled") == "1",
            spawned=raw.get("spawned") == "1", priority=raw.get("priority", ""), share=raw.get("share", ""),
            waiting_for=raw.get("waiting_for", ""), owner=raw.get("owner", ""),
        )

    def task_kwargs(self) -> dict[str, Any]:
        """What Flower shows of a run's task: agent, depth, session and a preview of the task."""
        return task_kwargs(self.agent, self.depth, self.session, self.task)
