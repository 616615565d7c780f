"""The distributed runtime: every delegation a Celery task, every run a journal in Redis.

Four rooms, by what the code does, and two small modules every room reads:

* ``journal/`` — a run in Redis and the only ways to write it: :class:`~.journal.Journal` (read,
  create, claim) and the :class:`~.journal.Lease` a claim returns (every fenced write), over the
  record, the store, the renewer, the due index, the Lua scripts and their registry.
* ``broker.py`` — the Celery app and how a run's task is sent (``send_task``, or the direct Redis
  send beside it, ``fast_send.py``; ``redis_broker.py`` fixes kombu's transport).
* ``children/`` — what happens to a delegation's children whoever their parent runs in: dispatch,
  finish-and-join, spawns, handoff, stops, cancel, questions, interactive rounds, wakes, policy.
* ``worker/`` — what only ``shelly worker`` runs: the tasks, the executor, the process, the
  reaper, the broker resync, the ``shelly_info`` answer.
* ``client/`` — what a process using the pool runs: the coordinator (``CeleryRuntime``: a root
  here, or submitted, waited for, answered, cancelled), the live tail, event reading, who is there.
* ``names.py`` (task names and kwargs: they cross processes) and ``settings.py`` (the numbers).

Floors: ``names``/``settings`` → ``journal`` → ``broker`` → ``children`` → ``worker`` | ``client``.
A module imports only its own room and the floors below it; the worker and the client never import
each other, and nothing here imports this package's root (``tests/test_layers.py`` pins all three).

Importing this package imports Celery and redis; the embedded path never does.
"""

from shelly_dist.runtime.celery.client.coordinator import CeleryRuntime, open_runtime
from shelly_dist.runtime.celery.names import RESUME_AGENT, RUN_AGENT
from shelly_dist.runtime.celery.settings import RuntimeSettings
from shelly_dist.runtime.celery.worker.executor import Progress, WorkerContext
from shelly_dist.runtime.celery.worker.process import WorkerSpec

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
