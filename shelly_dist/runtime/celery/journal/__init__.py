"""The journal room: a run as a record, its messages and its children's results in Redis, and
the only ways to write it.

Its face is :class:`Journal` (reading runs, creating roots, claiming a run) and the
:class:`Lease` a claim returns (every fenced write of one run: checkpoint, expect, release,
finish). Below them: ``record`` (the typed record and its status), ``store`` (Redis and the
scripts as both see it; ``run_script``), ``renewer`` (a process's leases kept from a thread),
``due`` (the global due index), ``stream`` (a run's events, batched for the session stream),
``scripts`` and ``control_scripts`` (the Lua), ``registry`` (all of it registered once per
client), ``turn_batch`` (one pipeline per loop turn). Nothing here imports another room: the
journal is the floor the broker, the children, the worker and the client stand on.
"""

from shelly_dist.runtime.celery.journal.lease import Held, Lease, LeaseLost
from shelly_dist.runtime.celery.journal.record import TERMINAL, RunEnd, RunRecord, RunStatus, child_key
from shelly_dist.runtime.celery.journal.runs import Claim, Journal, child_run_id
from shelly_dist.runtime.celery.journal.store import RunStore, run_script

__all__ = [
    "TERMINAL",
    "Claim",
    "Held",
    "Journal",
    "Lease",
    "LeaseLost",
    "RunEnd",
    "RunRecord",
    "RunStatus",
    "RunStore",
    "child_key",
    "child_run_id",
    "run_script",
]
