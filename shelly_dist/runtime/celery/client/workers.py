"""Asking the pool who is there: the client side of the ``shelly_info`` remote-control command,
which it broadcasts (``shelly doctor``); every worker answers it (:mod:`~shelly_dist.runtime.celery.worker.control`).

Why a Celery inspect command: it travels the same broker and queue-independent mailbox as
``celery inspect ping``, so whoever answers is a worker that can take tasks now, and the answer
carries what only the worker knows — the fingerprint of the config it loaded, the queues it
consumes and its concurrency. A worker whose fingerprint differs from the caller's fails every
run it takes (``config fingerprint mismatch``), so this is what tells an operator before a run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shelly_dist.runtime.celery.broker import create_app
from shelly_dist.runtime.celery.names import SHELLY_INFO
from shelly_dist.runtime.celery.settings import RuntimeSettings


@dataclass(frozen=True)
class WorkerInfo:
    """One worker's answer to :data:`SHELLY_INFO`."""

    name: str
    fingerprint: str = ""
    queues: list[str] = field(default_factory=list)
    concurrency: int | None = None
    pool: str = ""
    version: str = ""
    error: str = ""
    """Set when the worker answered but not with shelly's facts (not a shelly worker, or too old)."""


def list_workers(settings: RuntimeSettings, *, timeout: float) -> list[WorkerInfo]:
    """Every worker on the broker that answers within ``timeout`` seconds, sorted by name.

    Blocking (a broadcast, then ``timeout`` seconds of collecting replies); run it in a thread.
    Workers of other queues on the same broker answer too: filter on ``queues``.
    """
    app = create_app(settings)
    try:
        with app.connection_for_write() as conn:
            replies = app.control.broadcast(SHELLY_INFO, reply=True, timeout=timeout, connection=conn) or []
    finally:
        app.close()
    workers: dict[str, WorkerInfo] = {}
    for reply in replies:
        for name, body in reply.items():
            workers[name] = _worker_info(name, body)
    return [workers[n] for n in sorted(workers)]


def _worker_info(name: str, body: Any) -> WorkerInfo:
    if not isinstance(body, dict) or "fingerprint" not in body:
        error = body.get("error") if isinstance(body, dict) else None
        return WorkerInfo(name, error=str(error or body))
    concurrency = body.get("concurrency")
    return WorkerInfo(
        name,
        fingerprint=str(body.get("fingerprint") or ""),
        queues=[str(q) for q in body.get("queues") or []],
        concurrency=int(concurrency) if isinstance(concurrency, int) else None,
        pool=str(body.get("pool") or ""),
        version=str(body.get("version") or ""),
    )


@dataclass(frozen=True)
class BrokerProbe:
    """The answer of :func:`probe_amqp`: ``problem`` is ``""``, ``"unreachable"`` or ``"auth"``."""

    problem: str = ""
    error: str = ""


def probe_amqp(url: str, *, timeout: float) -> BrokerProbe:
    """Open one AMQP connection to ``url`` (no retries) and close it. Blocking."""
    from amqp.exceptions import AccessRefused
    from kombu import Connection

    conn = Connection(url, connect_timeout=timeout)
    try:
        conn.connect()
    except AccessRefused as exc:
        return BrokerProbe("auth", str(exc))
    except OSError as exc:  # refused, unresolvable, timed out (TimeoutError is an OSError)
        return BrokerProbe("unreachable", str(exc) or type(exc).__name__)
    except Exception as exc:  # kombu wraps some failures in its own types; the text says which
        text = f"{type(exc).__name__}: {exc}"
        return BrokerProbe("auth" if "ACCESS_REFUSED" in text or "Login" in text else "unreachable", text)
    finally:
        conn.release()
    return BrokerProbe()
