"""The distributed runtime: every delegation a Celery task, every run a journal in Redis.

One idea per module; the names are the map (no sub-packages), by part:

* journal and lease — ``settings`` (the numbers and how they relate), ``record`` (the typed run
  record and its status), ``store`` (Redis as the scripts see it, below the journal and the lease;
  ``run_script``, the one way a script is run), ``journal`` (reading runs, claiming them),
  ``lease`` (the only writer of a run), ``renewer`` (keeps a process's leases from a thread).
* delegation — ``executor`` (advancing a run on a worker), ``spawns`` (``spawn``'s children),
  ``handoff``, ``policy`` (``max_concurrency`` slots, fail-fast), ``questions`` (``ask_user``:
  registered, answered, timed out by one enforcer), ``interactive`` and ``round_timeout``
  (interactive delegation and its ``question_timeout``), ``wakes`` (team wakes as root runs).
* coordinator, client and event tail — ``coordinator`` (the top-level run in the CLI process,
  ``CeleryRuntime``), ``root_answerer`` (its ``ask_user``), ``events`` (the session's stream).
* reaper, renewer, control — ``reaper`` (re-sends lost runs, resumes joined parents, times out
  questions and rounds), ``due`` (the global due index it scans), ``cancel`` (a whole tree's
  cancel and ``CancelWatch``), ``stops`` (the one stop of a subtree every stopper calls),
  ``control`` (``shelly doctor``'s broadcast), ``process`` (the per-process event loop),
  ``app`` (the Celery app and task bodies), ``redis_broker`` (kombu's transport, fixed).
* scripts — ``scripts`` (the journal's Lua), ``control_scripts`` (the Lua of stops, questions,
  interactive rounds, handoff and the due index), ``registry`` (all of them registered once per
  client: the only module that registers one).

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
