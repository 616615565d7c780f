"""Wakes embedded: each an asyncio task on this loop, its run executed by the engine's runtime.

The pool's counterpart is ``runtime/celery/children/wakes.py``; both use :mod:`shelly_dist.runtime.wake`
for everything but how the run executes, so a team behaves the same in one process and on a pool.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from shelly_dist.agent import Agent
from shelly_dist.chats import Message, Role
from shelly_dist.runtime.base import Runtime
from shelly_dist.runtime.wake import WakeSettings, begin_wake, end_wake
from shelly_dist.workspace import ChannelMessage, DeadLetter, WorkspaceBase

logger = logging.getLogger(__name__)


class LocalWakes:
    """Runs the wakes of this process's team sessions.

    ``spawn(session, agent)`` builds a fresh instance of a team agent; ``workspace(session)`` is
    the session's workspace (the engine's ``SessionStores.workspace``)."""

    def __init__(
        self,
        runtime: Runtime,
        spawn: Callable[[str, str], Agent],
        workspace: Callable[[str], WorkspaceBase],
        settings: WakeSettings | None = None,
    ) -> None:
        self.runtime = runtime
        self.spawn = spawn
        self.workspace = workspace
        self.settings = settings or WakeSettings()
        self._tasks: dict[str, set[asyncio.Task[None]]] = {}

    async def on_post(self, session: str, _message: ChannelMessage, agents: list[str]) -> None:
        """A post landed in ``agents``' inboxes: wake each."""
        for agent in agents:
            await self.wake(session, agent)

    async def wake(self, session: str, agent: str, attempt: int = 1, delay: float = 0.0, error: str = "",
                   replay: DeadLetter | None = None) -> None:
        """Start a wake of ``agent`` (after ``delay`` seconds); returns at once."""
        task = asyncio.create_task(self._run(session, agent, attempt, delay, error, replay),
                                   name=f"wake:{session}:{agent}")
        tasks = self._tasks.setdefault(session, set())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def replay(self, session: str, letter: DeadLetter) -> None:
        await self.wake(session, letter.agent, replay=letter)

    def busy(self, session: str) -> bool:
        """Whether a wake of ``session`` is running or waiting for its retry."""
        return bool(self._tasks.get(session))

    async def _run(self, session: str, agent: str, attempt: int, delay: float, error: str,
                   replay: DeadLetter | None) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        ws = self.workspace(session)
        wake = await begin_wake(ws, agent, attempt=attempt, error=error, settings=self.settings, replay=replay)
        if wake is None:
            return
        reply: str | None = None
        failure: str | None = None
        try:
            prompt = [Message.text("user", Role.USER, wake.prompt)]
            outcome = await self.runtime.execute(self.spawn(session, agent), prompt, session=session,
                                                 run_id=wake.run_id)
            reply = outcome.reply.text_content()
        except asyncio.CancelledError:
            await ws.release_wake(agent, wake.token)
            raise
        except Exception as exc:  # the run failed: retried, then dead-lettered, never acked
            failure = f"{type(exc).__name__}: {exc}"

        async def retry(who: str, n: int, wait: float, why: str) -> None:
            await self.wake(session, who, n, wait, why)

        await end_wake(ws, wake, reply=reply, error=failure, retry=retry, settings=self.settings)

    async def aclose(self) -> None:
        """Cancel every wake still running (its inbox stays unacked)."""
        tasks = [t for group in self._tasks.values() for t in group]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
