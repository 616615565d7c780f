"""The reference: a raw Celery app with a no-op task, configured like shelly's app.

Same broker (Redis), same delivery settings (JSON, late acknowledgement, prefetch 1, threads
pool), plus a Redis result backend so the client can ``delay().get()``. Whatever shelly costs on
top of this is the runtime's own overhead. The worker is started as
``python -m celery -A bench.raw_celery worker …`` with the URLs in the environment.
"""

from __future__ import annotations

import os

from celery import Celery

BROKER_ENV = "BENCH_RAW_BROKER"
BACKEND_ENV = "BENCH_RAW_BACKEND"
QUEUE_ENV = "BENCH_RAW_QUEUE"
NOOP = "bench.noop"


def create_app(broker: str, backend: str, queue: str) -> Celery:
    raw = Celery("bench-raw", broker=broker, backend=backend, set_as_current=False)
    raw.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=queue,
        result_expires=600,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )

    @raw.task(name=NOOP)
    def noop() -> None:
        """Does nothing: the round trip is all broker and backend."""

    return raw


app = create_app(
    os.environ.get(BROKER_ENV, "redis://127.0.0.1:6379/7"),
    os.environ.get(BACKEND_ENV, "redis://127.0.0.1:6379/7"),
    os.environ.get(QUEUE_ENV, "bench-raw"),
)
