"""``shelly worker``: a Celery worker with shelly's app and the same config as the coordinator.

The default pool is ``threads``: one process holds many runs at once, each a thread waiting on the
process's single event loop (model calls are I/O). A heartbeat file, refreshed while the worker
and its loop are alive, is what container probes read (``python -m shelly_dist.runtime.heartbeat``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import os
import socket
from typing import TYPE_CHECKING

import click

from shelly_dist.cli.errors import fail
from shelly_dist.errors import UsageError

if TYPE_CHECKING:
    from shelly_dist.runtime.celery.settings import RuntimeSettings

DEFAULT_THREADS = 100
LOOP_PROBE_TIMEOUT = 5.0
"""Seconds the event loop has to answer the heartbeat's probe before a beat is skipped."""


def _loop_alive() -> bool:
    """The heartbeat's probe: the worker's event loop (once started) runs a no-op within
    :data:`LOOP_PROBE_TIMEOUT` seconds. A loop that is stopped, or blocked by a step doing sync
    work, stops the beats, so liveness restarts the worker instead of it holding tasks forever."""
    from shelly_dist.runtime.celery.worker.process import WorkerProcess

    process = WorkerProcess._instance
    if process is None:
        return True
    return loop_answers(process.loop, LOOP_PROBE_TIMEOUT)


def freeze_startup_objects(**_: object) -> None:
    """Move every object alive once the worker has started (modules, classes, the config, the
    engine) out of the cyclic garbage collector's reach (``gc.freeze``), in the process that runs
    the tasks.

    Runs in flight keep enough objects alive to trigger full collections, and each full collection
    walked those startup objects again: in the embedded runtime (the same step code, 75,000 startup
    objects) that was 80 ms per collection and a quarter of the CPU per child (0.78 → 0.56 ms with
    the freeze). Startup objects live as long as the process, so the collector never had anything
    to free among them."""
    gc.freeze()


def check_reachable(app: object) -> None:
    """Fail fast when the broker or Redis cannot be reached at start, instead of Celery retrying for
    many minutes: the error becomes one line naming the setting to fix (``cli.explain``)."""
    from shelly_dist.redisio.connection import sync_client
    from shelly_dist.redisio.sharded import check_sharded_pubsub_sync
    from shelly_dist.runtime.celery.broker import ensure_broker

    ensure_broker(app)  # type: ignore[arg-type]  # a supervisor (compose, Kubernetes) restarts the worker
    client = sync_client(app.shelly_settings.redis_url, socket_connect_timeout=10)  # type: ignore[attr-defined]
    try:
        client.ping()
        check_sharded_pubsub_sync(client)  # a cluster's tree channels need Redis 7.0+
    finally:
        client.close()


def loop_answers(loop: asyncio.AbstractEventLoop, timeout: float) -> bool:
    """Whether ``loop`` runs a no-op coroutine within ``timeout`` seconds (call from another thread)."""
    if loop.is_closed() or not loop.is_running():
        return False
    future = asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop)
    try:
        future.result(timeout=timeout)
    except TimeoutError:
        future.cancel()
        return False
    return True


@click.command("worker")
@click.option("--concurrency", "-c", type=int, default=None,
              help=f"Runs in flight per process (default {DEFAULT_THREADS} with threads, CPUs with prefork).")
@click.option("--pool", "-P", type=click.Choice(["threads", "prefork", "solo"]), default="threads", show_default=True)
@click.option("--queues", "-Q", default=None, help="Comma-separated queues (default: distributed.queue).")
@click.option("--loglevel", "-l", default="INFO", show_default=True)
@click.option("--hostname", "-n", default=None, help="Node name (default shelly@<host>).")
@click.option("--config", "config_path", default=None, help="Config file (default: <shelly-dir>/config.yaml).")
@click.option("--shelly-dir", default=".shelly", show_default=True)
@click.option("--heartbeat-file", default=None, help="Heartbeat file for probes (default $SHELLY_HEARTBEAT_FILE).")
@click.option("--heartbeat-interval", type=float, default=10.0, show_default=True)
@click.option("--metrics-port", type=click.IntRange(1, 65535), default=None, envvar="SHELLY_METRICS_PORT",
              help="Serve Prometheus metrics on /metrics at this port ($SHELLY_METRICS_PORT).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True, envvar="SHELLY_METRICS_HOST",
              help="Address the metrics server binds ($SHELLY_METRICS_HOST; 0.0.0.0 for a scraper elsewhere).")
@click.option("--task-events", "-E", "task_events", is_flag=True, default=False,
              help="Send Celery's task events (Flower's task list needs them); default: distributed.task_events.")
def worker_command(
    concurrency: int | None,
    pool: str,
    queues: str | None,
    loglevel: str,
    hostname: str | None,
    config_path: str | None,
    shelly_dir: str,
    heartbeat_file: str | None,
    heartbeat_interval: float,
    metrics_port: int | None,
    metrics_host: str,
    task_events: bool,
) -> None:
    """Run a worker that advances delegated runs from the queue."""
    if metrics_port is not None and pool == "prefork":
        fail(UsageError("worker: --metrics-port needs the threads or solo pool (each prefork child would "
                        "count alone, and one port serves one process)"))
    if config_path:
        os.environ["SHELLY_CONFIG"] = os.path.abspath(config_path)
    os.environ["SHELLY_DIR"] = os.path.abspath(shelly_dir)
    try:
        from celery.signals import worker_process_init, worker_ready, worker_shutdown

        from shelly_dist.runtime.celery.worker.tasks import create_worker_app
        from shelly_dist.runtime.heartbeat import Heartbeat

        app = create_worker_app()
        check_reachable(app)
    except Exception as exc:
        fail(exc)
    # The worker logs like any Celery worker, at --loglevel, in Celery's format (operators grep it),
    # or as JSON lines with SHELLY_LOG_FORMAT=json.
    app.conf.worker_hijack_root_logger = True
    node = hostname or "shelly@" + socket.gethostname()
    structured = structured_logs(node)
    if pool != "prefork":  # no fork ahead: open the engine and its MCP servers now, failing fast
        try:
            from shelly_dist.runtime.celery.worker.tasks import worker_process

            worker_process(app, node)
        except Exception as exc:
            fail(exc)
    if metrics_port is not None:
        serve_metrics(metrics_host, metrics_port)
    heartbeat = Heartbeat(heartbeat_file, interval=heartbeat_interval, probe=_loop_alive)
    worker_ready.connect(lambda **_: heartbeat.start(), weak=False)
    worker_shutdown.connect(lambda **_: heartbeat.stop(), weak=False)
    # The process that runs the tasks: this one (threads, solo) or each forked child (prefork).
    (worker_process_init if pool == "prefork" else worker_ready).connect(freeze_startup_objects, weak=False)
    settings = app.shelly_settings
    if task_events and not settings.task_events:
        settings = dataclasses.replace(settings, task_events=True)
        app.shelly_settings = settings
        app.conf.worker_send_task_events = True
    argv = celery_argv(settings, pool=pool, loglevel=loglevel, queues=queues, node=node,
                       concurrency=concurrency)
    app.worker_main(["--quiet", *argv] if structured else argv)  # no banner among the JSON lines


def structured_logs(node: str) -> bool:
    """With ``SHELLY_LOG_FORMAT=json``, Celery's handlers (the worker's and its tasks') write JSON
    lines carrying ``node`` as ``worker``; whether they do."""
    from celery.signals import after_setup_logger, after_setup_task_logger

    from shelly_dist.observability.logs import log_format, set_worker, use_json

    try:
        structured = log_format() == "json"
    except Exception as exc:
        fail(exc)
    set_worker(node)
    if structured:
        for signal in (after_setup_logger, after_setup_task_logger):
            signal.connect(lambda logger, **_: use_json(logger), weak=False)
    return structured


def serve_metrics(host: str, port: int) -> None:
    """Start the ``/metrics`` server, or fail naming the port (one in use, say)."""
    from shelly_dist.observability import metrics

    try:
        metrics.serve(port, host)
    except OSError as exc:
        fail(UsageError(f"worker: --metrics-port {port}: cannot serve on {host}:{port} ({exc.strerror or exc})"))


def celery_argv(
    settings: RuntimeSettings, *, pool: str, loglevel: str, queues: str | None, node: str, concurrency: int | None
) -> list[str]:
    """The ``celery worker`` arguments of ``shelly worker``: task events (for Flower) only when
    ``distributed.task_events`` (or ``-E``) asks for them, as Celery's own default.

    Without mingle and gossip: nothing here uses them (work is fenced in the journal, not by
    Celery's revokes or clocks), gossip has every worker consume every other worker's heartbeats
    (W² deliveries on an idle pool), and it failed to restart after each broker outage
    ("Error on restarting Gossip"). Heartbeats still go out, so Flower still lists the workers."""
    argv = [
        "worker",
        f"--pool={pool}",
        f"--loglevel={loglevel}",
        f"--queues={queues or settings.queue}",
        f"--hostname={node}",
        *(["--task-events"] if settings.task_events else []),
        "--without-mingle",
        "--without-gossip",
    ]
    if concurrency or pool == "threads":
        argv.append(f"--concurrency={concurrency or DEFAULT_THREADS}")
    return argv
