"""Layer 7 — the blackboard: a shared key/value store per session, in memory or in Redis, and
its ``shared_state_*`` tools (the Redis plumbing under it is :mod:`shelly_dist.redisio`)."""

from typing import TYPE_CHECKING

from shelly_dist._lazy import lazy_exports

if TYPE_CHECKING:
    from shelly_dist.state.base import Entry, Store, StoreBase
    from shelly_dist.state.changes import Changes, Signal
    from shelly_dist.state.memory import MemoryStore
    from shelly_dist.state.prompt import blackboard_prompt, blackboard_section
    from shelly_dist.state.tools import state_tools


# The Redis implementation is imported by path (``shelly_dist.state.redis.RedisStore``), so the
# embedded path never imports redis.

__all__ = [
    "Changes",
    "Entry",
    "MemoryStore",
    "Signal",
    "Store",
    "StoreBase",
    "blackboard_prompt",
    "blackboard_section",
    "state_tools",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
