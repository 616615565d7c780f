"""The embedded runtime: the whole run tree in this process, children as asyncio tasks.

:class:`LocalRuntime` is what ``shelly run`` uses when no broker is configured;
:class:`InlineDelegator` is how it (and ``Agent.run``, by default) runs children. It registers
:func:`run_here` as ``Agent.run``'s driver here, so the agent imports no runtime. Every stop of
a subtree (fail-fast, ``spawn_cancel``, an interactive delegation closing) goes through
:func:`.stops.stop`.
"""

from shelly_dist.agent.agent import drive_with
from shelly_dist.runtime.local.delegator import InlineDelegator
from shelly_dist.runtime.local.runtime import LocalRuntime, run_here

drive_with(run_here)

__all__ = ["InlineDelegator", "LocalRuntime", "run_here"]
