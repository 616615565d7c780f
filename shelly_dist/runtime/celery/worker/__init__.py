"""The worker room: what only a ``shelly worker`` process runs.

``tasks`` (the Celery tasks and the worker's app), ``executor`` (advancing a run: claim, rebuild,
step, end), ``process`` (the per-process event loop and what it owns), ``reaper`` (re-sends lost
runs, resumes joined parents, times out questions and rounds), ``batch_runner`` (the elected holder
of each provider batch desk: sends, polls, delivers), ``resync`` (a broker reconnect's re-check),
``control`` (the answer to ``shelly_info``). It stands on the children, the broker and
the journal, and never on the client.
"""

from shelly_dist.runtime.celery.worker.executor import Executor, Progress, WorkerContext
from shelly_dist.runtime.celery.worker.process import WorkerProcess, WorkerSpec

__all__ = ["Executor", "Progress", "WorkerContext", "WorkerProcess", "WorkerSpec"]
