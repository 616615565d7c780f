"""Shelly's ``batch:`` block: model calls through the vendors' batch APIs, at the batch price.

- :mod:`.api` — what a vendor's batch API is to a collector (:class:`BatchAPI`), its settings and
  outcomes;
- :mod:`.collector` — Shelly's collector in one process (:class:`BatchCollector`).

The vendors' clients are in :mod:`shelly_dist.providers.batches`; the pool's collector, which
suspends the waiting run instead of holding its worker, in the Celery runtime.
"""

from typing import TYPE_CHECKING

from shelly_dist._lazy import lazy_exports

if TYPE_CHECKING:
    from shelly_dist.models.batching.api import BATCH_KEY, BatchAPI, BatchSettings, Outcome, Poll
    from shelly_dist.models.batching.collector import BatchCollector


__all__ = ["BATCH_KEY", "BatchAPI", "BatchCollector", "BatchSettings", "Outcome", "Poll"]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
