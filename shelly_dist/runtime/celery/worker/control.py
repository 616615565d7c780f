"""A worker's answer to ``shelly_info``: the remote-control command ``shelly doctor`` broadcasts
(:mod:`~shelly_dist.runtime.celery.client.workers`) to learn who is there — the config
fingerprint the worker loaded, the queues it consumes, its pool and concurrency.

The command is registered when this module is imported (:mod:`.tasks` imports it), in the
worker's main process, so it answers under every pool. Its name is a literal
(:mod:`~shelly_dist.runtime.celery.names`): it crosses processes.
"""

from __future__ import annotations

from typing import Any

from celery.worker.control import inspect_command

from shelly_dist.runtime.celery.names import SHELLY_INFO


@inspect_command(name=SHELLY_INFO)
def shelly_info(state: Any, **_: Any) -> dict[str, Any]:
    """shelly worker facts: config fingerprint, queues, pool and concurrency."""
    from shelly_dist import __version__

    consumer = state.consumer
    spec = getattr(consumer.app, "shelly_spec", None)
    task_consumer = getattr(consumer, "task_consumer", None)
    queues = [q.name for q in task_consumer.queues] if task_consumer is not None else []
    pool = getattr(consumer, "pool", None)
    return {
        "fingerprint": getattr(spec, "fingerprint", ""),
        "queues": queues,
        "concurrency": getattr(pool, "limit", None),
        "pool": type(pool).__module__.rsplit(".", 1)[-1] if pool is not None else "",
        "version": __version__,
    }
