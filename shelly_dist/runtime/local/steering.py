"""Steering embedded: each run's inbox in memory, and the live runs a message may be addressed to.

The runs of this process attach themselves when they start stepping (weakly: a finished run is
freed as usual), so ``Session.steer`` can address the session's top-level run, an agent by name, or
a run by id. What a run does with its messages is :mod:`shelly_dist.agent.steering`'s, the same on
the pool.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from shelly_dist.agent import Run
from shelly_dist.agent.records import Phase
from shelly_dist.agent.steering import SteerMessage
from shelly_dist.errors import UsageError

__all__ = ["LiveRun", "MemoryInbox", "pick"]


@dataclass(frozen=True)
class LiveRun:
    """A run a steering message may go to, as both runtimes list them."""

    id: str
    agent: str
    """Its instance name (``coder-fix-1``)."""
    config: str
    """Its agent's config name (``coder``)."""
    depth: int


def pick(runs: list[LiveRun], *, session: str, agent: str | None = None, run: str | None = None) -> LiveRun:
    """The one run a message goes to: ``run`` by id, else the one live run of ``agent`` (instance
    or config name), else the session's top-level run. Anything else is a ``UsageError`` naming
    what to pass instead."""
    if run:
        found = [r for r in runs if r.id == run]
        what = f"run {run}"
    elif agent:
        found = [r for r in runs if agent in (r.agent, r.config)]
        what = f'agent "{agent}"'
    else:
        found = [r for r in runs if r.depth == 0]
        what = "a top-level run"
    if not found:
        live = ", ".join(f"{r.agent} ({r.id})" for r in runs) or "none"
        raise UsageError(f"steer: no live run of {what} in session {session} (live runs: {live})")
    if len(found) > 1:
        listed = ", ".join(f"{r.agent} ({r.id})" for r in found)
        raise UsageError(f"steer: {len(found)} live runs of {what} in session {session}: {listed}; pick one with --run")
    return found[0]


class MemoryInbox:
    """The steering inboxes of this process's runs (``Session.steer`` embedded)."""

    def __init__(self) -> None:
        self._messages: dict[str, list[SteerMessage]] = {}
        self._runs: weakref.WeakValueDictionary[str, Run] = weakref.WeakValueDictionary()

    def attach(self, run: Run) -> None:
        """``run`` may be steered from now on (called when it starts stepping)."""
        self._runs[run.state.run_id] = run

    async def unread(self, run: Run, *, fresh: bool = False) -> list[SteerMessage]:
        return list(self._messages.get(run.state.run_id, [])[run.state.steered:])

    def live(self, session: str) -> list[LiveRun]:
        """The runs of ``session`` still going in this process, oldest first."""
        return [LiveRun(r.state.run_id, r.agent.name, r.agent.config_name, r.state.depth)
                for r in list(self._runs.values())
                if r.agent.options.session == session and r.state.phase not in (Phase.DONE, Phase.FAILED)]

    def post(self, run_id: str, message: SteerMessage) -> int:
        """Append ``message`` to run ``run_id``'s inbox; how many it holds now."""
        for gone in [r for r in self._messages if r not in self._runs]:  # runs that ended and were freed
            del self._messages[gone]
        box = self._messages.setdefault(run_id, [])
        box.append(message)
        return len(box)
