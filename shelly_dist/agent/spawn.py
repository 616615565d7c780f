"""Asynchronous spawn (picoclaw's, made durable): start a child, keep working, hear of its end.

``spawn`` starts a child run and answers at once with its run id; the child's outcome is
**announced** into the parent's chat before the parent's next model call. What this module owns
is everything both runtimes share: the tools' input and answers, the guards (depth, the visited
chain and self-spawn, exactly as ``delegate``'s, through :func:`plan_children`), the dedup key,
the announcement text, and how a run drains announcements (from a cursor journaled in its
:class:`RunState`, so a run continued elsewhere neither loses nor repeats one).

Where a child runs and where its announcements are kept is a :class:`Spawner`: asyncio tasks and
memory embedded (:mod:`shelly_dist.runtime.local.spawns`), Celery tasks and Redis on the pool
(:mod:`shelly_dist.runtime.celery.children.spawns`). Both start the child through the one child lifecycle
(:mod:`shelly_dist.agent.children`).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, Field, ValidationError

from shelly_dist import events
from shelly_dist.agent.delegation import plan_children
from shelly_dist.agent.records import ChildRequest, DelegateEntry, child_run_id
from shelly_dist.chats import Message, Role
from shelly_dist.errors import DelegationRejected
from shelly_dist.models import Usage
from shelly_dist.tools import Tool, ToolBox
from shelly_dist.tools.schema import shared_schema

if TYPE_CHECKING:
    from shelly_dist.agent.agent import Agent
    from shelly_dist.agent.records import RunState

DEDUP_WINDOW = 300
"""Seconds during which the same dedup key returns the run it started instead of a second one."""

SUMMARY_LIMIT = 200
"""Characters of a child's result in ``spawn_status``."""

SPAWN_TOOLS = frozenset({"spawn", "spawn_status", "spawn_cancel"})
GROUP = "comms"
"""The policy group of the spawn tools (``group:comms``)."""

STATES = ("queued", "running", "completed", "failed", "canceled")


class SpawnInput(BaseModel):
    agent: str = Field(description="Name of the agent to start (see list_agents).")
    task: str = Field(description="What the agent must do, stated completely.")
    context: str = Field(default="", description="Everything the agent needs to know.")
    dedup_key: str | None = Field(default=None, description="Spawning the same key again within 5 minutes "
                                                             "returns the run already started.")
    detach: bool = Field(default=False, description="Do not wait for this child before finishing.")


class RunIdInput(BaseModel):
    run_id: str | None = Field(default=None, description="A spawned run's id (all of them when absent).")


@dataclass
class SpawnAck:
    """The answer of ``spawn``: ``accepted`` with the run id, or ``rejected`` with the reason."""

    run_id: str
    status: str
    error: str = ""

    def to_json(self) -> str:
        data: dict[str, Any] = {"run_id": self.run_id, "status": self.status}
        if self.error:
            data["error"] = self.error
        return json.dumps(data)


class Spawned(BaseModel):
    """One spawned run, as its parent's store keeps it (and ``spawn_status`` shows it)."""

    run_id: str
    agent: str
    task: str = ""
    state: str = "queued"
    detach: bool = False
    started: float = Field(default_factory=time.time)
    ended: float = 0.0
    iterations: int = 0
    result: str = ""
    error: str = ""
    usage: Usage | None = None
    """What the child and everything it delegated spent (its entry's), added to the parent's
    ``children_usage`` when the announcement is drained: a spawned run is part of the tree."""

    def status_json(self, now: float | None = None) -> dict[str, Any]:
        end = self.ended or (now or time.time())
        data: dict[str, Any] = {"run_id": self.run_id, "agent": self.agent, "state": self.state,
                                "elapsed": round(end - self.started, 1)}
        if self.result:
            data["result"] = self.result[:SUMMARY_LIMIT]
        if self.error:
            data["error"] = self.error
        return data

    def ended_with(self, entry: DelegateEntry, state: str, iterations: int) -> Spawned:
        """This run, ended with ``entry`` (``state`` ``completed``, ``failed`` or ``canceled``)."""
        result = entry.result or (entry.completion.summary if entry.completion else "")
        return self.model_copy(update={"state": state, "ended": time.time(), "iterations": iterations,
                                       "result": result, "error": entry.error or "", "usage": entry.usage})

    def announcement(self) -> str:
        """The text its parent's chat receives (picoclaw's two lines)."""
        duration = _duration(self.ended - self.started)
        head = f'[Spawn result from agent "{self.agent}" (run: {self.run_id})]'
        if self.state == "completed":
            return (f'{head}\n[Subagent "{self.agent}" completed in {duration} ({self.iterations} iterations)]:\n'
                    f"{self.result}")
        return f'{head}\n[Subagent "{self.agent}" failed after {duration}: {self.error or self.state}]'


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    return f"{int(seconds // 60)}m{int(seconds % 60)}s"


def state_of(entry: DelegateEntry, ending: str) -> str:
    """A spawned run's state from its ending (``done``/``failed``/``canceled``)."""
    return {"done": "completed", "canceled": "canceled"}.get(ending, "failed")


class Run(Protocol):
    """What spawning needs of the parent's run (:class:`~shelly_dist.agent.run.Run`)."""

    agent: Agent
    state: RunState

    def emit(self, kind: str, **data: object) -> None: ...


class Spawner(Protocol):
    """Where spawned children run and where their outcomes wait for the parent."""

    async def start(self, parent: Run, request: ChildRequest, spawned: Spawned, dedup: str) -> SpawnAck:
        """Start the child (unless ``dedup`` names one started within the window, or the parent
        has ``max_children`` running): never waits for it."""
        ...

    async def spawned(self, parent_id: str) -> list[Spawned]: ...

    async def cancel(self, parent_id: str, run_id: str) -> bool: ...

    async def announcements(self, parent_id: str, start: int) -> list[Spawned]:
        """The ended children announced to run ``parent_id``, from position ``start`` on."""
        ...

    async def wait(self, parent: Run) -> bool:
        """Block until an announcement past the run's cursor waits, and say so (True); False when
        none will come (every child that is not detached has been announced)."""
        ...


def limit_error(limit: int, active: int) -> str | None:
    """Why one more spawn is refused: ``max_children`` (0: no limit) already run."""
    if limit and active >= limit:
        return f"spawn: max_children {limit} reached ({active} running)"
    return None


def dedup_key(agent: str, task: str, key: str | None) -> str:
    """The key a spawn is deduplicated by: the caller's, or the agent and a hash of the task."""
    return key or f"{agent}:{hashlib.sha256(task.encode()).hexdigest()}"


def plan_spawn(run: Run, call_id: str, spec: SpawnInput) -> ChildRequest:
    """The child's request, checked exactly as a ``delegate`` task is (``DelegationRejected``
    says why not, with the ``spawn:`` prefix)."""
    agent, state = run.agent, run.state
    arguments = json.dumps({"tasks": [{"agent": spec.agent, "task": spec.task, "context": spec.context}]})
    try:
        entries, requests, _ = plan_children(
            call_id=call_id, arguments=arguments, registry=agent.registry, config_name=agent.config_name,
            instance_name=agent.name, depth=agent.depth, max_depth=agent.options.max_delegation_depth,
            visited=state.visited, run_id=state.run_id)
    except DelegationRejected as exc:
        raise DelegationRejected(str(exc).replace("delegate:", "spawn:", 1), agent=agent.name) from exc
    if not requests:
        error = entries[0].error if entries and entries[0] is not None else "rejected"
        raise DelegationRejected(f"spawn: {error}", agent=agent.name)
    request = requests[0]
    request.scopes, request.watched = list(state.scopes), state.watched
    request.priority, request.share = state.priority, state.share
    request.path = [*state.path, agent.name]
    return request


def spawn_toolbox(run: Run, spawner: Spawner) -> ToolBox:
    """``spawn``, ``spawn_status`` and ``spawn_cancel`` of one run (group ``comms``)."""

    async def spawn(arguments: str) -> str:
        try:
            spec = SpawnInput.model_validate_json(arguments or "{}")
        except ValidationError as exc:
            first = exc.errors()[0]
            return SpawnAck("", "rejected", f"spawn: invalid input: {'.'.join(map(str, first['loc']))}: "
                                            f"{first['msg']}").to_json()
        call_id = hashlib.sha1(f"{run.state.iteration}:{arguments}".encode()).hexdigest()[:12]
        try:
            request = plan_spawn(run, call_id, spec)
        except DelegationRejected as exc:
            return SpawnAck("", "rejected", str(exc)).to_json()
        run_id = child_run_id(run.state.run_id, request, run.state.iteration)
        record = Spawned(run_id=run_id, agent=spec.agent, task=spec.task, detach=spec.detach)
        ack = await spawner.start(run, request, record, dedup_key(spec.agent, spec.task, spec.dedup_key))
        if ack.status == "accepted":
            run.state.spawned += 1
        return ack.to_json()

    async def status(arguments: str) -> str:
        wanted = RunIdInput.model_validate_json(arguments or "{}").run_id
        now = time.time()
        runs = [s.status_json(now) for s in await spawner.spawned(run.state.run_id)
                if not wanted or s.run_id == wanted]
        if wanted and not runs:
            raise DelegationRejected(f'spawn_status: run "{wanted}" was not spawned by this agent')
        return json.dumps(runs)

    async def cancel(arguments: str) -> str:
        wanted = RunIdInput.model_validate_json(arguments or "{}").run_id
        if not wanted:
            raise DelegationRejected("spawn_cancel: run_id is required")
        if not await spawner.cancel(run.state.run_id, wanted):
            raise DelegationRejected(f'spawn_cancel: run "{wanted}" was not spawned by this agent or has ended')
        return json.dumps({"run_id": wanted, "status": "canceled"})

    return ToolBox([
        Tool("spawn", "Start an agent on a task in the background and keep working; its result is "
             "announced to you before a later model call.", shared_schema(SpawnInput), spawn, group=GROUP,
             retry_on_crash=True),
        Tool("spawn_status", "The runs you spawned: state, agent, elapsed seconds and a result summary.",
             shared_schema(RunIdInput), status, group=GROUP, retry_on_crash=True),
        Tool("spawn_cancel", "Cancel a run you spawned (and everything it started).",
             shared_schema(RunIdInput), cancel, group=GROUP),
    ], name="spawn")


async def drain(run: Run, spawner: Spawner) -> int:
    """Append the announcements waiting past the run's cursor to its chat as user messages and
    move the cursor; both are journaled by the run's next checkpoint, together."""
    state = run.state
    fresh = await spawner.announcements(state.run_id, state.announced)
    for spawned in fresh:
        run.agent.chat.append(Message.text("shelly", Role.USER, spawned.announcement()))
        if spawned.usage is not None:  # journaled with the cursor by the next checkpoint: counted once
            state.children_usage = state.children_usage + spawned.usage
        run.emit(events.SPAWN_ANNOUNCED, child_run=spawned.run_id, child_agent=spawned.agent, state=spawned.state)
    state.announced += len(fresh)
    return len(fresh)
