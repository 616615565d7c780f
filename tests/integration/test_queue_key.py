"""A task waiting for a worker is an entry of the Redis list named after the queue, in the broker
URL's database: the key KEDA's redis scaler watches (k8s/components/keda, checked against the
manifests in tests/unit/ops/test_k8s.py)."""

from __future__ import annotations

import uuid

import redis

from shelly_dist.runtime.celery.broker import create_app, send_run_task
from shelly_dist.runtime.celery.names import RUN_AGENT
from shelly_dist.runtime.celery.settings import RuntimeSettings

from .cluster import BROKER_DB


def test_a_waiting_task_is_an_entry_of_the_list_named_after_the_queue(redis_url: str) -> None:
    queue = f"keda-{uuid.uuid4().hex[:8]}"
    broker = f"{redis_url.rsplit('/', 1)[0]}/{BROKER_DB}"
    app = create_app(RuntimeSettings(broker_url=broker, redis_url=redis_url, queue=queue))
    client = redis.Redis.from_url(broker)
    try:
        assert send_run_task(app, RUN_AGENT, ["r1", "r1"], {"agent": "a"}, queue=queue)
        assert client.llen(queue) == 1
    finally:
        client.delete(queue)
        client.close()
        app.close()
