"""Layer 2 — talking to a model: the ``Completer`` protocol and usage accounting.

Retry, error classification and fallback chains also live here (see ``retry``, ``classify``,
``fallback``): they wrap any completer, whatever the provider; so does Shelly's batch collector
(``batching``: calls through the vendors' batch APIs).
"""

from typing import TYPE_CHECKING

from shelly_dist._lazy import lazy_exports

if TYPE_CHECKING:
    from shelly_dist.models.backoff import Backoff
    from shelly_dist.models.completer import Completer, ToolSpec
    from shelly_dist.models.cooldown import CooldownStore, MemoryCooldownStore
    from shelly_dist.models.fallback import Candidate, FallbackCompleter, with_fallback
    from shelly_dist.models.governor import GovernedCompleter, GovernorStore, KeyLimits, MemoryGovernorStore
    from shelly_dist.models.ratelimit import RateLimitSettings
    from shelly_dist.models.retry import RetryingCompleter
    from shelly_dist.models.usage import Usage, UsageTracker


__all__ = [
    "Backoff",
    "Candidate",
    "Completer",
    "CooldownStore",
    "FallbackCompleter",
    "GovernedCompleter",
    "GovernorStore",
    "KeyLimits",
    "MemoryCooldownStore",
    "MemoryGovernorStore",
    "RateLimitSettings",
    "RetryingCompleter",
    "ToolSpec",
    "Usage",
    "UsageTracker",
    "with_fallback",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
