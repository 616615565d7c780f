"""The embedded runtime: the whole run tree in this process, children as asyncio tasks.

This is what ``shelly run`` uses when no broker is configured. ``max_concurrency`` counts the
instances of an agent running at once within a session, across every run of that session this
runtime executes — as on the pool, where the same slots live in Redis. Cancelling the awaiting
task cancels every child with it.
"""

from __future__ import annotations

import asyncio
import uuid

from shelly_dist.agent import Agent, Delegator, Run
from shelly_dist.agent.root_life import root_finished, root_started, task_of
from shelly_dist.chats import Message
from shelly_dist.identity import acting_as
from shelly_dist.runtime.base import RunOutcome
from shelly_dist.runtime.local.delegator import InlineDelegator


async def run_here(agent: Agent, delegator: Delegator | None = None) -> Message:
    """``Agent.run``: the agent's run to its end in this process, children as asyncio tasks
    unless another ``delegator`` is given (registered with the agent layer by this package)."""
    inline = InlineDelegator() if delegator is None else None
    try:
        reply = await agent.execute(Run.start(agent, delegator=delegator or inline))
    except BaseException:
        if inline is not None:
            await asyncio.shield(inline.spawner.settle(cancel=True))
        raise
    if inline is not None:
        await inline.spawner.settle(cancel=False)
    return reply


class LocalRuntime:
    """Runs everything in the current event loop."""

    name = "local"

    def __init__(self) -> None:
        self._delegator = InlineDelegator()

    async def execute(
        self, agent: Agent, messages: list[Message], *, session: str, run_id: str | None = None
    ) -> RunOutcome:
        run = Run.start(agent, messages, run_id=run_id or uuid.uuid4().hex[:12], delegator=self._delegator)
        root_started(run, task_of(messages))
        try:
            with acting_as(session=session):
                reply = await agent.execute(run)
        except BaseException as exc:
            await asyncio.shield(self._delegator.spawner.settle(cancel=True))
            root_finished(run, error=exc)
            raise
        try:
            await self._delegator.spawner.settle(cancel=False)  # the tree is done only with its spawned runs
        except BaseException as exc:
            root_finished(run, error=exc)
            raise
        root_finished(run, reply=reply)
        return RunOutcome(run_id=run.state.run_id, reply=reply, usage=run.state.usage, completion=run.state.completion,
                          tree_usage=run.state.tree_usage)

    async def aclose(self) -> None:
        return None
