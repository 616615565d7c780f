"""Effects: Shelly's per-iteration hooks around each model call of the ReAct loop.

An effect runs before the model call (``EffectPhase.BEFORE_COMPLETE``) and after the reply is
appended (``EffectPhase.AFTER_COMPLETE``), in registration order; the first error stops the rest and
ends the run. Effects manage the context (compaction, trimming, masking, a sliding window, offloading
to storage), nudge the model (loop, stall, failure reflection, progress notes), hide tools, and
enforce hard budgets.

An effect holds only its configuration. What it remembers between iterations lives in a JSON dict
of the run's state (:attr:`IterationContext.state`), so it is journaled with every checkpoint and
a run continued on another worker, or after a suspension, remembers exactly what it did.
"""

from typing import TYPE_CHECKING

from shelly_dist._lazy import lazy_exports

if TYPE_CHECKING:
    from shelly_dist.agent.effects.base import (
        Effect,
        EffectChain,
        EffectPhase,
        IterationContext,
        estimate_tokens,
    )


__all__ = ["Effect", "EffectChain", "EffectPhase", "IterationContext", "estimate_tokens"]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
