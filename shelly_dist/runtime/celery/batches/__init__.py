"""Provider batches on the pool: a model call that goes to a vendor batch suspends its run, holding
no worker, until its reply comes back from whichever process polls the batch (DESIGN §10).

- :mod:`.layer` — the provider's completer on a worker (:class:`PoolBatchLayer`): joins the request
  to its provider key's desk and suspends the run; :class:`PoolBatching` builds it;
- :mod:`.desk` — a provider key's desk in Redis: window, flushes, request states (the journal);
- :mod:`.runner` — the elected holder of each desk (:class:`DeskRunner`, one per worker process):
  sends, polls, falls back, delivers.
"""

from shelly_dist.runtime.celery.batches.desk import drop_runs
from shelly_dist.runtime.celery.batches.layer import PROVIDER_BATCH, PoolBatching, PoolBatchLayer
from shelly_dist.runtime.celery.batches.runner import DeskRunner

__all__ = ["PROVIDER_BATCH", "DeskRunner", "PoolBatchLayer", "PoolBatching", "drop_runs"]
