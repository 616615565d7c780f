"""Limits for a whole run tree: ``limits: {model_requests, total_tokens, cost_usd}``.

An agent with limits opens a *scope* for each of its runs (the scope's id is the run's id); the
run and everything it delegates, at any depth, on any worker, carry that scope. Before every model
call a run **reserves** against each scope it carries — one request, plus an upper bound of the
call's tokens and cost — and after the reply it **settles** the reservation to what the provider
reported. A reservation that would pass a limit is refused, and the run ends with
:class:`~shelly_dist.errors.LimitExceeded`.

The ledger that keeps the totals is one protocol (:class:`BudgetLedger`) with an in-memory
implementation for the embedded runtime (:class:`MemoryLedger`) and a Redis one for the pool
(``shelly_dist.state.limits.RedisLedger``); both reserve across every scope atomically, so
concurrent runs can never overshoot a limit together.
"""

from typing import TYPE_CHECKING

from shelly_dist._lazy import lazy_exports

if TYPE_CHECKING:
    from shelly_dist.agent.limits.base import Budget, BudgetLedger, BudgetScope, Charge, Limits, Refusal
    from shelly_dist.agent.limits.gate import LimitedCompleter
    from shelly_dist.agent.limits.memory import MemoryLedger


__all__ = ["Budget", "BudgetLedger", "BudgetScope", "Charge", "LimitedCompleter", "Limits", "MemoryLedger", "Refusal"]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
