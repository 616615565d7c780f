"""The broker: the Celery app (JSON only, acknowledged late, one message at a time) and how a run's
task is sent — Celery's ``send_task``, or the direct Redis send beside it (:mod:`.fast_send`).

What every process that sends tasks needs (a coordinator, a worker's reaper, ``shelly doctor``),
and nothing of what only a worker needs: the task bodies are registered on a worker's app by
:mod:`.worker.tasks`. Task results are ignored — results travel through the run journal, never
through ``AsyncResult.get()`` (DESIGN §3 rule 5). The task names are in :mod:`.names`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from celery import Celery
from kombu.exceptions import OperationalError

from shelly_dist.observability import metrics
from shelly_dist.runtime.celery import redis_broker
from shelly_dist.runtime.celery.fast_send import (
    RedisSend,
    TaskSend,
    direct_send_refusal,
    shadow_name,
    version_refusal,
)
from shelly_dist.runtime.celery.settings import RuntimeSettings

logger = logging.getLogger(__name__)


def create_app(settings: RuntimeSettings) -> Celery:
    """A Celery app for ``settings``; a worker's registers its tasks too (:func:`.worker.tasks.create_worker_app`)."""
    redis_broker.install()  # a broker Redis restart must not end the worker (see redis_broker)
    app = Celery("shelly", broker=settings.broker_url, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        event_serializer="json",
        accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_default_queue=settings.queue,
        task_send_sent_event=False,  # Flower learns tasks from task-received; one PUBLISH less each
        worker_send_task_events=settings.task_events,  # Flower's task list; `distributed.task_events`
        task_track_started=True,
        broker_transport_options={"visibility_timeout": settings.visibility_timeout},
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_cancel_long_running_tasks_on_connection_loss=False,
    )
    app.shelly_settings = settings  # type: ignore[attr-defined]
    return app


BROKER_CHECK_RETRIES = 3
"""Broker connection attempts (about 12 s with kombu's back-off) before a process that is about to
use the broker for the first time gives up with the broker's error."""


def ensure_broker(app: Celery, retries: int = BROKER_CHECK_RETRIES) -> None:
    """Connect to ``app``'s broker once, raising kombu's ``OperationalError`` when it cannot be
    reached. Called where a process starts using the broker (``shelly worker``'s start, a
    coordinator's first run): a broker that is wrong or down fails there with one line
    (``cli.explain``), while a broker that goes away later is waited out (:func:`send_run_task`)."""
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=retries)


def send_run_task(app: Celery, name: str, args: list[Any], kwargs: dict[str, Any], *, queue: str) -> bool:
    """Send the task of a run the journal already holds with its deadline (a queued root, children
    registered by ``EXPECT``, a parent whose join completed, a re-enqueue by a reaper); returns
    whether the broker took it. A broker that does not take it now (cut, restarting) is logged, not
    raised: failing the run for it would lose work the journal keeps. The caller then makes the run
    due at once (:meth:`.Journal.due_now`), so a worker's reaper sends it again on its next scan."""
    try:
        app.send_task(name, args=args, kwargs=kwargs, queue=queue, shadow=shadow_name(name, kwargs))
    except (OperationalError, OSError) as exc:
        logger.warning("broker: did not take %s of run %s (%s); a worker's reaper sends it again",
                       name, args[0] if args else "?", exc)
        metrics.TASKS_SENT.labels(path="kombu", outcome="refused").inc()
        return False
    metrics.TASKS_SENT.labels(path="kombu", outcome="taken").inc()
    return True


class KombuSend:
    """:func:`send_run_task` in a thread, for the brokers :class:`.RedisSend` does not serve."""

    def __init__(self, app: Celery, queue: str) -> None:
        self.app = app
        self.queue = queue

    async def __call__(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> bool:
        return await asyncio.to_thread(send_run_task, self.app, name, args, kwargs, queue=self.queue)

    async def aclose(self) -> None:
        return None


def run_task_sender(app: Celery, queue: str, *, client_name: str = "shelly-send") -> TaskSend:
    """How this process sends its runs' tasks to ``queue``: straight to a Redis broker's list
    (:class:`.RedisSend`: no thread, one ``LPUSH`` per fan-out, the message kombu would write) when
    ``app``'s settings allow it (:func:`.fast_send.direct_send_refusal`), else Celery's ``send_task``."""
    why = direct_send_refusal(app, queue)
    if why is None:
        logger.debug("broker: tasks to queue %s are pushed to Redis directly", queue)
        return RedisSend(app, queue, client_name=client_name)
    if why == version_refusal():
        _warn_version_once(why)
    else:
        logger.debug("broker: tasks to queue %s go through Celery's send_task (%s)", queue, why)
    return KombuSend(app, queue)


_version_warned: set[str] = set()


def _warn_version_once(why: str) -> None:
    """Say once per process that the direct send refused an unchecked Celery/kombu: the user sees
    why sends are slower than the benchmarks say, without a line per coordinator or reaper."""
    if why not in _version_warned:
        _version_warned.add(why)
        logger.warning("broker: tasks go through Celery's send_task: %s", why)
