"""Wakes on the pool: a Celery task starts each, the journal runs it, the run's end closes it.

``shelly.team_wake(session, agent)`` (sent when a post lands in the agent's inbox) takes the
agent's wake lease and the high-water mark (:func:`~shelly_dist.runtime.wake.begin_wake`) and
submits the wake as a **root run** of the journal, under a run id starting with ``wake``. From
there the pool's own machinery runs it — any worker advances it, a killed worker's run is
re-enqueued by the reapers once its lease lapses and continues from its journal, its children are
delegated without blocking a worker — and when it ends, whichever worker ends it closes the wake
(:func:`finish_pool_wake`: post the reply, ack, or retry / dead-letter). Nothing is acked before
that end, so a wake is at least once. A retry is a new ``team_wake`` task with ``not_before`` set
(the task waits with Celery's countdown, not in a worker slot).

A wake asked for leaves a **check** in the schedules' due index first (:func:`wake_member`, due
``sweep`` seconds after the wake should start); every worker's schedule ticker sweeps the due
checks (``runtime/schedules.py``): an inbox still waiting with nobody holding the agent's lease
means the send was refused or lost (or its worker died before journaling the run, holding the
lease only ``claim`` seconds), and the wake is sent again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import asdict

from celery import Celery

from shelly_dist.chats import Message, Role
from shelly_dist.runtime.celery.broker import create_app, send_run_task
from shelly_dist.runtime.celery.journal import Journal, RunRecord, RunStatus
from shelly_dist.runtime.celery.names import RUN_AGENT, Enqueue
from shelly_dist.runtime.celery.settings import RuntimeSettings
from shelly_dist.runtime.wake import TEAM_WAKE, Wake, WakeSettings, begin_wake, end_wake
from shelly_dist.workspace import ChannelMessage, DeadLetter, WorkspaceBase
from shelly_dist.workspace.due import DueIndex, wake_member

logger = logging.getLogger(__name__)

class PoolWakes:
    """Sends wakes to the pool (from a worker, a coordinator or the CLI)."""

    def __init__(self, settings: RuntimeSettings, app: Celery | None = None, *, due: DueIndex | None = None,
                 wake_settings: WakeSettings = WakeSettings()) -> None:
        self.settings = settings
        self._app = app
        self.due = due
        """Where each wake asked for leaves its check (:func:`wake_member`), so a refused or lost
        send is sent again by the sweeper; ``None`` (``workflow replay``) leaves none."""
        self.wake_settings = wake_settings

    @property
    def app(self) -> Celery:
        if self._app is None:
            self._app = create_app(self.settings)
        return self._app

    async def on_post(self, session: str, _message: ChannelMessage, agents: list[str]) -> None:
        """A post landed in ``agents``' inboxes: wake each."""
        for agent in agents:
            await self.wake(session, agent)

    async def replay(self, session: str, letter: DeadLetter) -> None:
        await self.wake(session, letter.agent, replay_up_to=letter.up_to)

    async def aclose(self) -> None:
        return None

    async def wake(self, session: str, agent: str, attempt: int = 1, delay: float = 0.0, error: str = "",
                   replay_up_to: int = 0) -> None:
        """Send ``shelly.team_wake`` (to start after ``delay`` seconds), after leaving the wake's
        check: written before the send, so neither a refused send nor a sender killed after it
        leaves the inbox waiting."""
        if self.due is not None and not replay_up_to:
            await self.due.hint(wake_member(session, agent), time.time() + delay + self.wake_settings.sweep)
        kwargs = {"attempt": attempt, "error": error, "not_before": time.time() + delay, "replay_up_to": replay_up_to}
        sent = await asyncio.to_thread(send_run_task, self.app, TEAM_WAKE, [session, agent], kwargs,
                                       queue=self.settings.queue)
        if not sent:  # the messages stay in the inbox; the wake's check sends it again
            logger.warning("team: wake of %s in %s not sent (broker refused it); its check retries", agent, session)


async def start_pool_wake(
    ws: WorkspaceBase, journal: Journal, enqueue: Enqueue, fingerprint: str, session: str, agent: str, *,
    attempt: int = 1, error: str = "", replay_up_to: int = 0, settings: WakeSettings = WakeSettings(),
    token: str = "",
) -> str:
    """Begin a wake of ``agent`` and submit its run; the run id, or "" when there was nothing to do."""
    replay = None
    if replay_up_to:
        replay = next((d for d in await ws.dead_letters() if d.agent == agent and d.up_to == replay_up_to), None)
        if replay is None:
            return ""
    wake = await begin_wake(ws, agent, attempt=attempt, error=error, settings=settings, replay=replay, token=token,
                            lease=settings.claim)
    if wake is None:
        return ""
    await ws.save_wake(wake.run_id, json.dumps(asdict(wake)))
    messages = [Message.text("user", Role.USER, wake.prompt)]
    await journal.create_root(wake.run_id, agent=agent, session=session, mode="worker", task=wake.prompt,
                              fingerprint=fingerprint, messages=messages, if_absent=True)
    # Journaled: the run reapers now re-send it if its task is lost, so the lease may live as long
    # as a wake may run. A worker killed before this point held the agent for `claim` seconds only.
    if not await ws.renew_wake(agent, wake.token, settings.lease):
        logger.warning("wake of %s in %s: its lease lapsed before the run was journaled; another wake may "
                       "overlap it", agent, session)
    await enqueue(RUN_AGENT, [wake.run_id, wake.run_id],
                  {"agent": agent, "depth": 0, "session": session, "preview": f"wake of {agent}"})
    return wake.run_id


async def finish_pool_wake(
    ws: WorkspaceBase, wakes: PoolWakes, record: RunRecord, status: str, *, reply: str, error: str,
    settings: WakeSettings = WakeSettings(),
) -> str:
    """Close the wake whose run ``record`` just ended (``status`` done, failed or canceled)."""
    saved = await ws.saved_wake(record.id)
    if saved is None:  # closed already (a redelivered end)
        return ""
    wake = Wake(**json.loads(saved))

    async def retry(agent: str, attempt: int, delay: float, why: str) -> None:
        await wakes.wake(record.session, agent, attempt, delay, why)

    ok = status == RunStatus.DONE
    outcome = await end_wake(ws, wake, reply=reply if ok else None, error=None if ok else (error or status),
                             retry=retry, settings=settings)
    await ws.forget_wake(record.id)
    return outcome
