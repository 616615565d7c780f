"""The distributed runtime's settings, as plain values the engine hands down.

The runtime never reads the config file itself (the engine sits above it); it receives these.

How the durations relate (DESIGN §3 rule 3):

* ``lease`` (seconds, default 10) is how long a run stays with a worker that stops answering. The
  worker's renewer thread renews it every quarter of its length while a step is in flight, so it
  is independent of ``step_time_limit`` (a step may run for many leases) and of how busy the event
  loop is. When a worker dies, a reaper on any live worker re-enqueues its run within about
  ``lease + reap_interval`` — the recovery time.
* ``step_time_limit`` bounds one step (a model call and its tools); a step over it fails the run.
  It also bounds how long a worker's event loop may go without running before the renewer takes
  it for hung and lets its leases lapse (see ``journal/renewer.py``).
* ``visibility_timeout`` is only the Redis broker's backstop for a message whose worker died: no
  correctness depends on it. A redelivered message whose run is leased by a live worker is dropped
  (the lease holder, or the reaper if it dies, carries the run on), so a step longer than the
  visibility timeout is never executed twice.
* ``requeue_after`` is how long a queued run, or a parent whose children have all joined, may wait
  for its task before the reaper sends another (its sender died before the broker took it). Once
  the broker took the task, the run is left to the broker for ``max(visibility_timeout,
  requeue_after)``: a message queued behind a backlog is late, not lost. A send the broker refused
  does not wait at all: the run is made due at once, for the reapers' next scan. A duplicate is
  harmless: its claim finds the run taken or finished and drops it. With ``requeue_after`` at
  least ``lease`` (the defaults: 30 s and 10 s) a child's finish writes nothing to the global due
  index (``lease.Lease.finish``); shorter, the finish that completes a join hints it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RuntimeSettings:
    broker_url: str
    redis_url: str
    queue: str = "shelly"
    step_time_limit: float = 600.0
    """Seconds one step (a model call and its tools) may take before the run fails."""
    visibility_timeout: float = 660.0
    """Seconds before the Redis broker hands an unacknowledged task to another worker (a backstop)."""
    retention: int = 7 * 24 * 3600
    key_prefix: str = "shelly:"
    max_attempts: int = 3
    """Starts of the same step without progress before the run is failed (a poison run)."""
    poll_interval: float = 1.0
    """Seconds a waiter re-reads Redis when no wake-up arrives (lost pub/sub costs at most this)."""
    lease: float = 10.0
    """Seconds a run stays with a worker that stopped renewing its lease (renewed every lease/4)."""
    reap_interval: float = 2.0
    """Seconds between two scans of the deadline indexes by each worker's reaper."""
    requeue_after: float = 30.0
    """Seconds a queued run or a completed join waits for its task before the reaper re-sends it."""
    task_events: bool = False
    """Workers send Celery's task events (Flower's task list is built from them); off by default,
    as in Celery (``shelly worker -E`` / ``distributed.task_events: true``)."""

    @property
    def lease_ms(self) -> int:
        return int(self.lease * 1000)

    @property
    def heartbeat_interval(self) -> float:
        return self.lease / 4
