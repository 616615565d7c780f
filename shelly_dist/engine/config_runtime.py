"""The distributed runtime's settings from a config's ``distributed:`` section.

Beside the config models, not in ``engine/worker.py``: the engine (opening a pool runtime),
``shelly doctor``, the CLI and the worker all read it, and when it lived in the worker's module the
engine imported the worker, which imports the engine (the engine ↔ session ↔ team ↔ worker circle).
Celery is imported only when the settings are built, so the embedded path never loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shelly_dist.engine.config_models import Config
from shelly_dist.errors import ConfigError

if TYPE_CHECKING:
    from shelly_dist.runtime.celery import RuntimeSettings


def runtime_settings(config: Config) -> RuntimeSettings:
    """The distributed runtime's settings from the ``distributed:`` section (env overrides applied)."""
    from shelly_dist.redisio.connection import cluster_url
    from shelly_dist.runtime.celery import RuntimeSettings

    d = config.distributed
    if not d.broker_url:
        raise ConfigError(
            "config: distributed.broker_url: a broker is required to run workers "
            "(set it in the config or SHELLY_BROKER_URL)",
            field="distributed.broker_url",
        )
    if cluster_url(d.broker_url) is not None:
        raise ConfigError(
            "config: distributed.broker_url: a Redis Cluster cannot be the Celery broker (kombu has no "
            "cluster transport); use a single Redis or RabbitMQ there and the cluster in distributed.redis_url",
            field="distributed.broker_url",
        )
    redis_url = d.effective_redis_url()
    if not redis_url:
        raise ConfigError(
            "config: distributed.redis_url: required when the broker is not Redis "
            "(state, journals and events always live in Redis)",
            field="distributed.redis_url",
        )
    return RuntimeSettings(
        broker_url=d.broker_url,
        redis_url=redis_url,
        queue=d.queue,
        step_time_limit=d.step_time_limit,
        visibility_timeout=d.effective_visibility_timeout(),
        retention=int(d.retention),
        key_prefix=d.key_prefix,
        max_attempts=d.max_deliveries or 3,
        lease=d.lease,
        task_events=d.task_events,
    )
