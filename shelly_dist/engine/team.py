"""Which wakes an engine runs: in this process on the local runtime, on the pool otherwise.

An @mention posted through this engine's stores (a ``channel_send``, ``shelly send``, a workflow's
kickoff) starts a wake of each agent it lands in the inbox of (``SessionStores.on_post``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shelly_dist.runtime.local.wakes import LocalWakes
from shelly_dist.runtime.wake import Wakes

if TYPE_CHECKING:
    from shelly_dist.engine.engine import Engine


def team_wakes(engine: Engine) -> Wakes:
    """The wakes of ``engine``: on its pool when its runtime is one, else on this loop."""
    settings = getattr(engine.runtime, "settings", None)
    if engine.runtime.name != "local" and settings is not None:
        from shelly_dist.runtime.celery.wakes import PoolWakes

        return PoolWakes(settings)
    return LocalWakes(engine.runtime, lambda session, agent: engine.registry(session).spawn(agent),
                      engine.stores.workspace)
