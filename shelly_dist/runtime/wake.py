"""A wake: one run of a team agent for the messages waiting in its inbox (DESIGN §7).

The same two halves serve both runtimes (embedded: ``runtime/local/wakes.py``; the pool:
``runtime/celery/children/wakes.py``), which differ only in how the run in between executes:

* :func:`begin_wake` takes the agent's wake lease (one wake per agent at a time, across the pool),
  charges the session's **wake budget** (``WakeBudget``: wakes in all, per minute, and a ping-pong
  loop between two agents; over it the session's wakes pause with a ``wakes_paused`` event and a
  system post, until the user speaks),
  takes the **high-water mark** (the channel's last id, now), and builds the prompt from the inbox
  up to that mark — messages arriving during the run wait for the next wake;
* :func:`end_wake`, after the run: on success posts the reply to the channel (its @mentions wake
  others) and acks the inbox up to the mark; on failure it asks for a retry with backoff, and
  after the last attempt records a **dead letter** (and moves the cursor past those messages so
  the team can go idle: the dead letter, not the inbox, is then their record). It never acks a
  failure silently. It releases the lease, and asks for a new wake if messages arrived meanwhile.

Delivery is at least once: a run that dies after posting and before its end is recorded is redone
(its reply may then be posted twice); the inbox is acked only after a success.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from shelly_dist import events
from shelly_dist.workspace.base import WorkspaceBase
from shelly_dist.workspace.models import SYSTEM, USER, ChannelMessage, DeadLetter
from shelly_dist.workspace.prompt import wake_prompt

logger = logging.getLogger(__name__)

TEAM_WAKE = "shelly.team_wake"
"""The Celery task that starts a wake on the pool (``runtime/celery/children/wakes.py``)."""

WAKE_PREFIX = "wake"
"""Run ids of wakes start with this, so a run's end tells a wake from any other root run cheaply."""


@dataclass(frozen=True)
class WakeSettings:
    attempts: int = 3
    """Runs a wake gets before its messages are dead-lettered."""
    backoff: float = 1.0
    """Seconds before the first retry; doubled for each next one."""
    lease: float = 900.0
    """Seconds a wake lease lives: the longest a wake may run before another may start for the agent."""
    claim: float = 10.0
    """Seconds the lease first lives on the pool, until the wake's run is in the journal (then it
    gets :attr:`lease`): a worker killed in between blocks its agent this long, not :attr:`lease`."""
    sweep: float = 5.0
    """Seconds after a wake is asked for (or due) that the pool checks it happened, and sends it
    again when the agent's inbox still waits and nobody holds its lease (``runtime/schedules.py``)."""

    def delay(self, attempt: int) -> float:
        """Seconds to wait before ``attempt`` (2, 3, …)."""
        return self.backoff * 2 ** max(attempt - 2, 0)


@dataclass(frozen=True)
class Wake:
    """A wake that holds its agent's lease: what its end needs to know."""

    agent: str
    token: str
    up_to: int
    after: int
    attempt: int
    prompt: str
    replay: bool = False

    @property
    def run_id(self) -> str:
        digest = hashlib.sha256(f"{self.agent}:{self.up_to}:{self.attempt}:{self.token}".encode()).hexdigest()
        return f"{WAKE_PREFIX}{digest[:20]}"


class Wakes(Protocol):
    """Who runs a process's wakes: :class:`~shelly_dist.runtime.local.wakes.LocalWakes` (this
    loop) or :class:`~shelly_dist.runtime.celery.children.wakes.PoolWakes` (the pool)."""

    async def on_post(self, session: str, message: ChannelMessage, agents: list[str]) -> None:
        """A post landed in ``agents``' inboxes: wake each."""
        ...

    async def wake(self, session: str, agent: str, attempt: int = 1, delay: float = 0.0, error: str = "") -> None:
        """Start a wake of ``agent`` (after ``delay`` seconds); returns at once."""
        ...

    async def replay(self, session: str, letter: DeadLetter) -> None:
        """Run a dead letter's messages again."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class TeamContext(Protocol):
    """What a worker's context offers when it serves teams (the engine's ``EngineContext``)."""

    def workspace(self, session: str) -> WorkspaceBase: ...

    async def wake_ended(self, record: Any, status: str, *, reply: str, error: str) -> None:
        """A wake's run (``record``: its ``RunRecord``) ended: close the wake."""
        ...


def is_wake_run(run_id: str, depth: int) -> bool:
    """Whether a run is a wake (a root run whose id starts with :data:`WAKE_PREFIX`)."""
    return depth == 0 and run_id.startswith(WAKE_PREFIX)


Retry = Callable[[str, int, float, str], Awaitable[None]]
"""Ask for a wake of ``agent``: attempt number, delay in seconds, last error ("" for a fresh wake)."""


async def begin_wake(
    ws: WorkspaceBase, agent: str, *, attempt: int = 1, error: str = "", settings: WakeSettings = WakeSettings(),
    replay: DeadLetter | None = None, token: str = "", lease: float | None = None,
) -> Wake | None:
    """Take ``agent``'s lease and build its prompt; ``None`` when another wake holds the lease or
    the inbox is empty. ``replay`` takes a dead letter's messages instead of the inbox's. ``token``
    names the holder (default: a fresh one); the same token takes its own lease again, so a
    redelivered wake task (its Celery task id) carries on instead of waiting for the lease to lapse.
    ``lease``: seconds to hold it (default ``settings.lease``; the pool takes ``settings.claim``
    first and renews once the run is journaled)."""
    token = token or uuid.uuid4().hex[:12]
    if not await ws.acquire_wake(agent, token, settings.lease if lease is None else lease):
        return None
    try:
        up_to = await ws.last_id() if replay is None else replay.up_to
        start = await ws.cursor(agent) if replay is None else replay.after
        inbox = await ws.inbox(agent, up_to=up_to, after=start)
        if not inbox:
            await ws.release_wake(agent, token)
            return None
        if attempt == 1 and replay is None:  # a retry or a replay redoes a wake already counted
            user_said = max((e.message.id for e in inbox if e.message.sender == USER), default=0)
            scheduled = any(e.message.sender == SYSTEM for e in inbox)  # a schedule's post
            if reason := await ws.charge_wake(agent, now=time.time(), user_said=user_said, scheduled=scheduled):
                await ws.release_wake(agent, token)
                await _paused(ws, agent, reason)
                return None
        prompt = await wake_prompt(ws, agent, inbox, project=await ws.project(), attempt=attempt,
                                   attempts=settings.attempts, error=error)
        await ws.status_set(agent, "running", f"wake for {len(inbox)} message(s)")
        ws.observe(events.WAKE_STARTED, agent, {"up_to": up_to, "messages": len(inbox), "attempt": attempt,
                                                 "replay": replay is not None})
    except BaseException:
        await ws.release_wake(agent, token)
        raise
    return Wake(agent=agent, token=token, up_to=up_to, after=start, attempt=attempt, prompt=prompt,
                replay=replay is not None)


async def _paused(ws: WorkspaceBase, agent: str, reason: str) -> None:
    """Say once, on the channel and as an event, that the session's wakes are paused and why."""
    text = (f"wakes paused: {reason}; {agent}'s wake and any after it are not started. Send a message as "
            "the user to resume (the counts start afresh), or raise the workflow's wake_budget.")
    if await ws.mark_pause_told():
        await ws.send(SYSTEM, text, kind="system")
        ws.observe(events.WAKES_PAUSED, agent, {"reason": reason, "message": text})
    logger.warning("team: %s", text)


async def end_wake(
    ws: WorkspaceBase, wake: Wake, *, reply: str | None, error: str | None, retry: Retry,
    settings: WakeSettings = WakeSettings(),
) -> str:
    """Close ``wake`` after its run (``error`` set when the run failed); returns what happened:
    ``done``, ``retrying`` or ``dead``."""
    agent = wake.agent
    if error is None:
        outcome = "done"
        if reply and reply.strip():
            await ws.send(agent, reply.strip())
        await ws.ack(agent, wake.up_to)
        if wake.replay:
            await ws.drop_dead_letter(agent, wake.up_to)
    elif wake.attempt < settings.attempts and not wake.replay:
        outcome = "retrying"
    else:  # a failed replay is not retried: its dead letter stays, with the new error
        outcome = "dead"
        await ws.dead_letter(DeadLetter(agent=agent, after=wake.after, up_to=wake.up_to, error=error,
                                        attempts=wake.attempt, failed_at=time.time()))
        await ws.ack(agent, wake.up_to)
    ws.observe(events.WAKE_FINISHED, agent, {"outcome": outcome, "up_to": wake.up_to, "attempt": wake.attempt,
                                              "error": error or ""})
    if outcome == "retrying":
        await ws.set_retry(agent, wake.attempt + 1, error or "")
    elif not wake.replay:
        await ws.clear_retry(agent)
    await ws.status_set(agent, "idle", "" if error is None else f"last wake failed: {error}"[:200])
    await ws.release_wake(agent, wake.token)
    if outcome == "retrying":
        logger.info("wake of %s failed (attempt %d): %s; retrying", agent, wake.attempt, error)
        await retry(agent, wake.attempt + 1, settings.delay(wake.attempt + 1), error or "")
    elif await ws.inbox(agent):  # arrived during the run (or a retry's lease was busy)
        await retry(agent, 1, 0.0, "")
    return outcome
