"""Layer 8 — where runs execute: in-process (``LocalRuntime``) or on a Celery worker pool
(``shelly_dist.runtime.celery``, imported only when a broker is configured)."""

from shelly_dist.runtime.base import RunOutcome, Runtime
from shelly_dist.runtime.local import LocalRuntime

__all__ = ["LocalRuntime", "RunOutcome", "Runtime"]
