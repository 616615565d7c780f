"""What a run and its subtree spent: tokens, cost and model requests, summed at read time.

Both runtimes report a run's own usage (on the pool in its record, embedded in its
``run_finished`` event); a subtree's is summed here from those, so spending costs no extra write
on the hot path. ``shelly runs`` and the console (``shelly serve``) read it the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_creation_tokens", "cache_read_tokens")


@dataclass
class Spent:
    """Tokens (input + output + cache), cost in USD and model requests of a run or a subtree."""

    total_tokens: int = 0
    cost_usd: float = 0.0
    model_requests: int = 0

    @classmethod
    def of(cls, usage: Mapping[str, Any]) -> Spent:
        """From a usage dict (:class:`~shelly_dist.models.Usage` as JSON); missing fields count 0."""
        tokens = sum(int(usage.get(k, 0) or 0) for k in TOKEN_FIELDS)
        return cls(tokens, float(usage.get("cost_usd", 0) or 0), int(usage.get("model_requests", 0) or 0))

    def __add__(self, other: Spent) -> Spent:
        return Spent(self.total_tokens + other.total_tokens, self.cost_usd + other.cost_usd,
                     self.model_requests + other.model_requests)

    def to_json(self) -> dict[str, Any]:
        return {"total_tokens": self.total_tokens, "cost_usd": round(self.cost_usd, 6),
                "model_requests": self.model_requests}

    def text(self) -> str:
        return f"tokens={self.total_tokens} cost=${self.cost_usd:.4f} requests={self.model_requests}"


def spent_by_run(runs: Iterable[tuple[str, str, Mapping[str, Any]]]) -> dict[str, tuple[Spent, Spent]]:
    """``(own, subtree)`` of every run given as ``(id, parent id, own usage)``, by run id; a subtree
    counts only the runs given (records past their retention are gone)."""
    own: dict[str, Spent] = {}
    children: dict[str, list[str]] = {}
    for rid, parent, usage in runs:
        own[rid] = Spent.of(usage)
        children.setdefault(parent, []).append(rid)
    tree: dict[str, Spent] = {}

    def total(rid: str) -> Spent:
        if rid not in tree:
            out = own[rid]
            for child in children.get(rid, []):
                out = out + total(child)
            tree[rid] = out
        return tree[rid]

    return {rid: (own[rid], total(rid)) for rid in own}
