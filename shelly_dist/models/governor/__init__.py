"""The provider governor: one account per API key and model, shared by every process that calls
it — requests, input and output tokens per minute and calls in flight reserved before a call and
settled after it, a 429's pause heard by everyone, the vendor's limits learned from its headers,
``interactive`` work before ``batch`` and fair shares within a priority (DESIGN §10).

:class:`GovernedCompleter` wraps each key's vendor completer; the store is
:class:`MemoryGovernorStore` embedded and ``shelly_dist.state.governor.RedisGovernorStore`` on a
pool (the same algorithm, pinned by one suite of tests run against both).
"""

from typing import TYPE_CHECKING

from shelly_dist._lazy import lazy_exports

if TYPE_CHECKING:
    from shelly_dist.models.governor.base import (
        BATCH,
        BOUND,
        INTERACTIVE,
        Ask,
        Decision,
        GovernorStore,
        KeyLimits,
        Learned,
        Settle,
    )
    from shelly_dist.models.governor.completer import GOVERNOR, GovernedCompleter
    from shelly_dist.models.governor.headers import learned_from
    from shelly_dist.models.governor.memory import MemoryGovernorStore

__all__ = [
    "BATCH",
    "BOUND",
    "GOVERNOR",
    "INTERACTIVE",
    "Ask",
    "Decision",
    "GovernedCompleter",
    "GovernorStore",
    "KeyLimits",
    "Learned",
    "MemoryGovernorStore",
    "Settle",
    "learned_from",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
