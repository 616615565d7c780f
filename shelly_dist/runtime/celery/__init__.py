"""The distributed runtime: every delegation a Celery task, every run a journal in Redis.

Modules, one idea each: ``settings`` (the numbers and how they relate), ``scripts`` (the Lua that
makes journal and join atomic), ``store`` (Redis as the scripts see it, below the journal and the
lease), ``journal`` (reading runs, claiming them), ``lease`` (the only writer of a run),
``record`` (the typed run record and its status), ``executor`` (advancing a run on a
worker), ``process`` (the per-process event loop), ``app`` (the Celery app and task bodies),
``coordinator`` (the top-level run in the CLI process), ``cancel`` and ``events``.
Importing this package imports Celery and redis; the embedded path never does.
"""

from shelly_dist.runtime.celery.coordinator import CeleryRuntime, open_runtime
from shelly_dist.runtime.celery.executor import RESUME_AGENT, RUN_AGENT, Progress, WorkerContext
from shelly_dist.runtime.celery.process import WorkerSpec
from shelly_dist.runtime.celery.settings import RuntimeSettings

__all__ = [
    "RESUME_AGENT",
    "RUN_AGENT",
    "CeleryRuntime",
    "Progress",
    "RuntimeSettings",
    "WorkerContext",
    "WorkerSpec",
    "open_runtime",
]
