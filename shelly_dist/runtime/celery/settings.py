"""The distributed runtime's settings, as plain values the engine hands down.

The runtime never reads the config file itself (the engine sits above it); it receives these.
The relations that matter: ``step_time_limit < lease < visibility_timeout``. A step that runs
longer than its limit is failed by its worker; the lease that marks a run as being advanced
outlives any live step; and the broker only redelivers an unacknowledged message once the lease
of a dead worker has expired, so a redelivered step never races a live one.
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
    """Seconds before the broker hands an unacknowledged task to another worker (Redis broker)."""
    retention: int = 7 * 24 * 3600
    key_prefix: str = "shelly:"
    max_attempts: int = 3
    """Starts of the same step without progress before the run is failed (a poison run)."""
    poll_interval: float = 1.0
    """Seconds a waiter re-reads Redis when no wake-up arrives (lost pub/sub costs at most this)."""

    @property
    def lease_ms(self) -> int:
        """The run lease: longer than any live step, shorter than the redelivery delay."""
        margin = max(1.0, (self.visibility_timeout - self.step_time_limit) / 2)
        return int((self.step_time_limit + margin) * 1000)
