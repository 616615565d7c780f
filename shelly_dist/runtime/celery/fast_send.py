"""A Redis broker's task send without kombu: the message kombu would push, pushed by us.

Why: profiles of the coordinator put half of its CPU per child in ``app.send_task`` — Celery's
routing and options, kombu's producer, channel and transport objects, a thread hop per task —
while what reaches Redis is one ``LPUSH`` of a JSON string (docs/benchmarks.md, "Where the missed
targets' time goes"). :class:`RedisSend` builds that string itself and pushes every task sent in
the same turn of the event loop (a fan-out's children, a batch's roots) with one ``LPUSH`` of many
values, on an asyncio client: one round trip per fan-out, no thread.

What it writes is what kombu 5's Redis transport writes for ``app.send_task(name, args=...,
kwargs=..., queue=queue, shadow=...)`` from a thread that runs no task (read from
``celery/app/base.py`` ``send_task``, ``celery/app/amqp.py`` ``as_task_v2`` and
``send_task_message``, ``kombu/messaging.py`` ``Producer.publish``, ``kombu/transport/virtual/
base.py`` ``basic_publish`` and ``kombu/transport/redis.py`` ``_put``):

* Celery sends a task for a direct exchange through the anonymous exchange (``exchange=''``,
  ``routing_key=<queue>``), which kombu's virtual channel delivers straight to the queue, never
  reading the ``_kombu.binding.*`` sets; its Redis transport ``LPUSH``\\ es the envelope to the
  queue's list, named ``<global_keyprefix><queue>`` for priority 0 (kombu's ``_q_for_pri``).
* The envelope: ``body`` (the protocol-2 body ``[args, kwargs, embed]`` as JSON, base64),
  ``content-encoding``, ``content-type``, ``headers`` (the task's), ``properties``
  (``correlation_id``, ``reply_to``, ``delivery_mode``, ``delivery_info``, ``priority``,
  ``body_encoding``, ``delivery_tag``).
* Before its first send to a queue, kombu declares it (exchange, queue, binding): done here once
  per sender, through kombu itself.

:func:`direct_send_refusal` names any setting this copy does not follow (another serializer,
compression, routes, a priority, ``task_send_sent_event``, publish signal receivers, transport
options other than ``visibility_timeout`` and ``global_keyprefix``, ...): such an app keeps
``app.send_task``. So does any install whose Celery or kombu is not a version the copy was checked
against (:data:`CHECKED_VERSIONS`): users install their own Celery, and a message format read from
another version must not reach their workers, so the copy refuses itself at run time (one log line,
:func:`version_refusal`) rather than trusting a test only our CI runs.
``tests/integration/test_fast_send.py`` compares both sends field by field on a real Redis: an
upgrade re-reads the sources above, runs it, and only then adds the new pair here.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from dataclasses import dataclass
from typing import Any, Protocol

import celery
import kombu
import redis.asyncio as aioredis
from celery import Celery, signals
from celery.utils.nodenames import anon_nodename
from celery.utils.saferepr import saferepr
from kombu.entity import maybe_delivery_mode
from kombu.exceptions import OperationalError
from kombu.utils.json import dumps
from kombu.utils.uuid import uuid
from redis.exceptions import RedisError

from shelly_dist.observability import metrics
from shelly_dist.redisio.connection import connect
from shelly_dist.runtime.celery.journal.turn_batch import TurnBatch

logger = logging.getLogger(__name__)

REDIS_SCHEMES = ("redis://", "rediss://")
KNOWN_TRANSPORT_OPTIONS = frozenset({"visibility_timeout", "global_keyprefix"})
"""Redis transport options that leave the pushed message and its key as this module makes them
(``visibility_timeout`` only matters to consumers)."""

CHECKED_VERSIONS: frozenset[tuple[str, str]] = frozenset({("5.7.0", "5.7.0")})
"""The (Celery, kombu) versions whose sources the envelope was read from and compared against on a
real Redis (``tests/integration/test_fast_send.py``); any other install sends through
``app.send_task``."""

CELERY_DEFAULTS: dict[str, Any] = {
    "task_protocol": 2,
    "task_serializer": "json",
    "task_compression": None,
    "task_routes": None,
    "task_queues": None,
    "task_default_priority": None,
    "task_queue_max_priority": None,
    "task_send_sent_event": False,
}
"""Celery settings (at Celery's defaults, or as ``app.create_app`` sets them) whose value this copy
of the send assumes; any other value (say, ``zlib`` compression) sends through ``app.send_task``."""

SEND_TIMEOUT = 10.0
"""Seconds one attempt of a push waits for Redis's reply: a stopped Redis must not hold a fan-out
for the store client's 30 s per attempt (kombu's producer, without a socket timeout, waited for
ever)."""
SEND_RETRIES = 2
"""Retries of a push on a dropped connection or a timeout (the store client's backoff: 0.1 s, then
0.2 s); Celery's publish retry policy gave kombu 3. A push retried after Redis did take it leaves a
duplicate message: harmless, the run's claim lets one delivery run it."""


def shadow_name(name: str, kwargs: dict[str, Any]) -> str | None:
    """The name Flower's task list and the worker's log lines show for a run's task: Celery's
    ``shadow``, ``shelly.run_agent[researcher]``, so a row names its agent (the task that runs is
    still ``name``; the session is in the kwargs beside it)."""
    agent = kwargs.get("agent")
    return f"{name}[{agent}]" if agent else None


CONNECTIONS = 4
"""Connections a sender may open to the broker: the pushes of one loop turn go in one ``LPUSH``,
so a process sending thousands of runs needs a few at a time (a blocking pool: past it, a push
waits for a free one; a batch of 40 items held 9 unbounded)."""


class TaskSend(Protocol):
    """Sends a run's task (name, args, kwargs) to the broker; whether the broker took it."""

    async def __call__(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> bool: ...

    async def aclose(self) -> None: ...


def installed_versions() -> tuple[str, str]:
    """The installed (Celery, kombu) versions, read when asked (a test may replace them)."""
    return celery.__version__, kombu.__version__


def version_refusal() -> str | None:
    """Why the installed Celery/kombu may not be sent to directly: not a pair in
    :data:`CHECKED_VERSIONS`; ``None`` when they are."""
    versions = installed_versions()
    if versions in CHECKED_VERSIONS:
        return None
    checked = ", ".join(f"{c}/{k}" for c, k in sorted(CHECKED_VERSIONS))
    return (f"Celery {versions[0]} / kombu {versions[1]} are not a version the direct send was checked "
            f"against ({checked})")


def direct_send_refusal(app: Celery, queue: str) -> str | None:
    """Why tasks of ``app`` to ``queue`` must go through ``app.send_task``; ``None`` when
    :class:`RedisSend` writes exactly what it would."""
    why = version_refusal()
    if why is not None:
        return why
    conf = app.conf
    url = conf.broker_url or ""
    if not url.startswith(REDIS_SCHEMES) or ";" in url:
        return f"the broker ({url.split('://', 1)[0]}://) is not one Redis"
    for name, value in CELERY_DEFAULTS.items():
        if conf.get(name) != value:
            return f"{name} is {conf.get(name)!r}"
    if conf.broker_use_ssl:
        return "broker_use_ssl is set"
    options = set(conf.broker_transport_options or {}) - KNOWN_TRANSPORT_OPTIONS
    if options:
        return f"broker_transport_options has {sorted(options)}"
    if signals.before_task_publish.receivers or signals.after_task_publish.receivers:
        return "a receiver of before_task_publish or after_task_publish is connected"
    q = app.amqp.queues[queue]
    if q.exchange.type != "direct":
        return f"queue {queue!r} is bound to a {q.exchange.type} exchange"
    if q.queue_arguments or q.expires or q.message_ttl or q.max_priority:
        return f"queue {queue!r} has arguments (expiry, TTL or priority)"
    return None


@dataclass(frozen=True)
class Destination:
    """Where a queue's messages go and how they are marked, resolved once per queue."""

    key: str
    """The Redis list: ``<global_keyprefix><queue>`` (priority 0 has no suffix)."""
    routing_key: str
    delivery_mode: int


class TaskMessages:
    """The JSON string kombu's Redis transport pushes for one of ``app``'s tasks to ``queue``."""

    def __init__(self, app: Celery, queue: str) -> None:
        self.app = app
        conf = app.conf
        q = app.amqp.queues[queue]
        mode = q.exchange.delivery_mode or conf.task_default_delivery_mode
        prefix = (conf.broker_transport_options or {}).get("global_keyprefix", "")
        self.destination = Destination(key=f"{prefix}{queue}", routing_key=queue,
                                       delivery_mode=maybe_delivery_mode(mode))
        self._repr_levels = conf.task_repr_maxlevels
        self._args_size = app.amqp.argsrepr_maxsize
        self._kwargs_size = app.amqp.kwargsrepr_maxsize

    def envelope(self, name: str, args: list[Any], kwargs: dict[str, Any], *, shadow: str | None) -> str:
        """The message, as ``app.send_task(name, args=args, kwargs=kwargs, queue=..., shadow=shadow)``
        from a thread running no task would push it (fresh task id and delivery tag)."""
        task_id = uuid()
        body = dumps((args, kwargs, {"callbacks": None, "errbacks": None, "chain": None, "chord": None}))
        headers = {
            "lang": "py",
            "task": name,
            "id": task_id,
            "shadow": shadow,
            "eta": None,
            "expires": None,
            "group": None,
            "group_index": None,
            "retries": 0,
            "timelimit": [None, None],
            "root_id": task_id,
            "parent_id": None,
            "argsrepr": saferepr(args, self._args_size, maxlevels=self._repr_levels),
            "kwargsrepr": saferepr(kwargs, self._kwargs_size, maxlevels=self._repr_levels),
            "origin": anon_nodename(),
            "ignore_result": None,
            "replaced_task_nesting": 0,
            "stamped_headers": None,
            "stamps": {},
        }
        d = self.destination
        return dumps({
            "body": base64.b64encode(body.encode()).decode(),
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": headers,
            "properties": {
                "correlation_id": task_id,
                "reply_to": self.app.thread_oid,
                "delivery_mode": d.delivery_mode,
                "delivery_info": {"exchange": "", "routing_key": d.routing_key},
                "priority": 0,
                "body_encoding": "base64",
                "delivery_tag": uuid(),
            },
        })


class RedisSend:
    """One process's sends to one queue of a Redis broker: the tasks sent in one turn of the event
    loop leave in one ``LPUSH`` (atomic: the broker took all of them or none)."""

    def __init__(self, app: Celery, queue: str, *, client_name: str = "shelly-send") -> None:
        self.app = app
        self.queue = queue
        self.messages = TaskMessages(app, queue)
        self._client_name = client_name
        self._client: aioredis.Redis | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._batch: TurnBatch[str, str | None] = TurnBatch(self._push)
        self._declared = False

    async def __call__(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> bool:
        """Send one task; returns whether the broker took it (logged when it did not, as
        ``app.send_task``'s refusals are, and never raised: see ``app.send_run_task``)."""
        error = await self._batch(self.messages.envelope(name, args, kwargs, shadow=shadow_name(name, kwargs)))
        if error is not None:
            logger.warning("broker: did not take %s of run %s (%s); a worker's reaper sends it again",
                           name, args[0] if args else "?", error)
        metrics.TASKS_SENT.labels(path="redis", outcome="refused" if error else "taken").inc()
        return error is None

    async def _push(self, messages: list[str]) -> list[str | None]:
        """``LPUSH`` a turn's messages in one command, in the order they were sent (workers pop
        from the other end); for each, the error that kept Redis from taking it (all or none)."""
        try:
            if not self._declared:
                await asyncio.to_thread(self._declare)
            await self._redis().lpush(self.messages.destination.key, *messages)
        except (RedisError, OSError, OperationalError) as exc:
            return [f"{type(exc).__name__}: {exc}"] * len(messages)
        return [None] * len(messages)

    def _declare(self) -> None:
        """Kombu's declaration of the queue (exchange, queue, binding), which ``app.send_task``
        makes before its first message to it on a connection: once per sender, through kombu."""
        with self.app.producer_or_acquire() as producer:
            producer.maybe_declare(self.app.amqp.queues[self.queue])
        self._declared = True

    def _redis(self) -> aioredis.Redis:
        """The broker client of the running loop (a runtime driven by several ``asyncio.run`` in
        turn gets one per loop; a connection cannot move between loops)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = connect(self.app.conf.broker_url, client_name=self._client_name,
                                   socket_timeout=SEND_TIMEOUT, retries=SEND_RETRIES, max_connections=CONNECTIONS)
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        """Wait for the pushes under way, then close the client."""
        await self._batch.drain()
        if self._client is not None and self._loop is asyncio.get_running_loop():
            await self._client.aclose()
        self._client = None
