"""Layer 2 — talking to a model: the ``Completer`` protocol and usage accounting.

Retry, error classification and fallback chains also live here (see ``retry``, ``classify``,
``fallback``): they wrap any completer, whatever the provider.
"""

from shelly_dist.models.completer import Completer, ToolSpec
from shelly_dist.models.usage import Usage, UsageTracker

__all__ = ["Completer", "ToolSpec", "Usage", "UsageTracker"]
