"""The Celery app: JSON only, acknowledged late, one message at a time, readable task names.

Task names are literal strings (``shelly.run_agent``, ``shelly.resume_agent``): moving code never
orphans a message already in a queue. Their keyword arguments (agent, depth, session, preview)
exist for Flower: they are what an operator reads in the task list. Task results are ignored —
results travel through the run journal, never through ``AsyncResult.get()`` (DESIGN §3 rule 5).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import time
from typing import Any, NoReturn

from celery import Celery, Task
from celery.signals import worker_shutdown
from kombu.exceptions import OperationalError

from shelly_dist.errors import ConfigError, MCPError, StoreError
from shelly_dist.observability import metrics
from shelly_dist.runtime.celery import (
    control,  # noqa: F401  registers the shelly_info inspect command
    redis_broker,
)
from shelly_dist.runtime.celery.executor import RESUME_AGENT, RUN_AGENT
from shelly_dist.runtime.celery.fast_send import RedisSend, TaskSend, direct_send_refusal, shadow_name
from shelly_dist.runtime.celery.process import WorkerProcess, WorkerSpec
from shelly_dist.runtime.celery.resync import BrokerResync
from shelly_dist.runtime.celery.settings import RuntimeSettings
from shelly_dist.runtime.wake import TEAM_WAKE
from shelly_dist.state.refusal import refusal

BOOTSTRAP_ENV = "SHELLY_WORKER_BOOTSTRAP"
DEFAULT_BOOTSTRAP = "shelly_dist.engine.worker:worker_spec"
"""Where a worker gets its :class:`WorkerSpec`: a ``module:function`` path resolved at start-up,
so the runtime layer never imports the engine (which sits above it) — it is handed to it."""

STORE_RETRY_SECONDS = 2.0
REFUSED_BACKOFF = (0.5, 5.0)
"""First and longest pause (seconds, doubling) while Redis refuses writes; see :func:`_advance`."""
BUSY_RETRY_SECONDS = 0.5
"""First back-off of a run whose agent has no free max_concurrency slot (doubling, at most 10 s)."""
FOREIGN_RETRY_SECONDS = 5.0
"""How long a run of another config generation waits before its task is offered again (to a worker
of its generation, during a rolling update; a plain re-queue, so any worker of the queue may take it)."""

logger = logging.getLogger(__name__)


def create_app(settings: RuntimeSettings) -> Celery:
    """A Celery app for ``settings``; registers the tasks (needed only by workers)."""
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
    _register_tasks(app)
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


class RunEnded(Exception):
    """A run's task ended its run ``failed`` or ``canceled``: raised so Celery reports the task
    as FAILURE, with the reason (Flower showed a failed or canceled agent run as SUCCESS). Declared
    in the tasks' ``throws``: logged in one line, no traceback; nothing retries it."""


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
    logger.debug("broker: tasks to queue %s go through Celery's send_task (%s)", queue, why)
    return KombuSend(app, queue)


def worker_process(app: Celery, hostname: str) -> WorkerProcess:
    """This process's :class:`WorkerProcess` for ``app``, opened (engine, MCP sessions) on first use.

    ``shelly worker`` calls it before taking tasks (pools that do not fork), so a config whose
    MCP server cannot start fails the worker at start-up, naming the server, instead of failing
    every task it takes while the runs wait forever.
    """
    spec: WorkerSpec | None = getattr(app, "shelly_spec", None)
    if spec is None:
        raise ConfigError("worker: no WorkerSpec on the app; start workers with `shelly worker`")
    queue = spec.settings.queue
    return WorkerProcess.get(spec, lambda: run_task_sender(app, queue, client_name=f"shelly-send:{hostname}"),
                             hostname)


def _fail_unopened(task: Task, run_id: str, root: str, exc: BaseException) -> NoReturn:
    """This worker cannot open its engine (a prefork child whose MCP server fails, say): fail the
    run with the cause instead of leaving its parent waiting forever, and join it as usual."""
    from shelly_dist.agent import DelegateEntry
    from shelly_dist.runtime.celery.executor import finish_and_join
    from shelly_dist.runtime.celery.journal import Journal
    from shelly_dist.state.connection import connect

    spec: WorkerSpec = task.app.shelly_spec  # type: ignore[attr-defined]
    error = f"worker {task.request.hostname}: cannot start: {exc}"

    async def enqueue(name: str, args: list[Any], kwargs: dict[str, Any]) -> None:
        task.app.send_task(name, args=args, kwargs=kwargs, queue=spec.settings.queue, shadow=shadow_name(name, kwargs))

    async def fail() -> None:
        client = connect(spec.settings.redis_url, client_name="shelly-worker-unopened")
        try:
            journal = Journal(client, spec.settings)
            token = f"unopened:{task.request.hostname}:{task.request.id}"
            claim = await journal.claim(run_id, root, token, task.request.hostname or "worker")
            if claim.lease is not None:
                entry = DelegateEntry(agent=claim.lease.record.agent, error=error)
                await finish_and_join(journal, enqueue, claim.lease, "failed", entry, error=error)
        finally:
            await client.aclose()

    logger.error("run %s: %s", run_id, error)
    asyncio.run(fail())
    raise RunEnded(f"run {run_id} failed: {error}")


def _advance(task: Task, run_id: str, root: str, session: str = "", agent: str = "") -> dict[str, str]:
    try:
        process = worker_process(task.app, task.request.hostname or "worker")
    except (ConfigError, MCPError, OSError) as exc:
        return _fail_unopened(task, run_id, root, exc)
    pause, refused_since = REFUSED_BACKOFF[0], None
    while True:
        try:
            progress = process.call(process.executor.advance(run_id, root, session=session, agent=agent))
            break
        except StoreError as exc:  # Redis unreachable for now: the journal is intact, try again later
            refused = refusal(exc)
            if refused is None:
                logger.warning("run %s: %s; retrying", run_id, exc)
                raise task.retry(countdown=STORE_RETRY_SECONDS, max_retries=None) from exc
            # Redis refuses writes (full, say): a retry could not be published to the same Redis, and
            # Celery would call that unrecoverable and exit; so this task waits here, with backoff,
            # and advances the run again (from its last checkpoint) once Redis takes writes.
            level = logging.WARNING if refused_since is None else logging.INFO
            refused_since = refused_since or time.monotonic()
            logger.log(level, "run %s: %s; advancing it again in %.1fs (refused for %.0fs)",
                       run_id, refused, pause, time.monotonic() - refused_since)
            time.sleep(pause)
            pause = min(pause * 2, REFUSED_BACKOFF[1])
    if progress.outcome == "busy":  # max_concurrency: every slot of the agent is taken; back off and retry
        countdown = min(BUSY_RETRY_SECONDS * 2 ** min(task.request.retries or 0, 5), 10.0)
        raise task.retry(countdown=countdown, max_retries=None)
    if progress.outcome == "foreign":  # a rolling update: leave it for a worker of its generation
        logger.info("run %s: config %s, not ours; re-queued for its generation", run_id, progress.detail)
        raise task.retry(countdown=FOREIGN_RETRY_SECONDS, max_retries=None)
    if progress.outcome in ("failed", "canceled"):
        raise RunEnded(f"run {run_id} {progress.outcome}: {progress.detail or progress.outcome}")
    return {"run": run_id, "outcome": progress.outcome, "detail": progress.detail}


def _team_wake(task: Task, session: str, agent: str, attempt: int, error: str, not_before: float,
               replay_up_to: int) -> dict[str, str]:
    from shelly_dist.runtime.celery.wakes import start_pool_wake
    from shelly_dist.runtime.wake import TeamContext

    wait = not_before - time.time()
    if wait > 0:  # a retry's backoff: Celery holds the task, no worker slot waits
        raise task.retry(countdown=wait, max_retries=None)
    process = worker_process(task.app, task.request.hostname or "worker")
    executor = process.executor
    if not isinstance(executor.ctx, TeamContext):
        return {"outcome": "skipped", "detail": "this worker serves no teams"}
    try:
        run_id = process.call(start_pool_wake(
            executor.ctx.workspace(session), executor.journal, executor.enqueue, executor.ctx.fingerprint, session,
            agent, attempt=attempt, error=error, replay_up_to=replay_up_to, token=task.request.id or ""))
    except StoreError as exc:
        logger.warning("wake of %s in %s: %s; retrying", agent, session, exc)
        raise task.retry(countdown=STORE_RETRY_SECONDS, max_retries=None) from exc
    return {"run": run_id, "outcome": "submitted" if run_id else "skipped"}


def _register_tasks(app: Celery) -> None:
    @app.task(name=TEAM_WAKE, bind=True, max_retries=None)
    def team_wake(
        self: Task, session: str, agent: str, attempt: int = 1, error: str = "", not_before: float = 0.0,
        replay_up_to: int = 0,
    ) -> dict[str, str]:
        """Wake team agent ``agent`` of ``session`` for its inbox: submit the wake's run."""
        return _team_wake(self, session, agent, attempt, error, not_before, replay_up_to)

    @app.task(name=RUN_AGENT, bind=True, max_retries=None, throws=(RunEnded,))
    def run_agent(
        self: Task, run_id: str, root: str, agent: str = "", depth: int = 0, session: str = "", preview: str = ""
    ) -> dict[str, str]:
        """Start (or continue) run ``run_id`` of ``agent`` at ``depth`` in ``session``."""
        return _advance(self, run_id, root, session, agent)

    @app.task(name=RESUME_AGENT, bind=True, max_retries=None, throws=(RunEnded,))
    def resume_agent(
        self: Task, run_id: str, root: str, agent: str = "", depth: int = 0, session: str = "", preview: str = ""
    ) -> dict[str, str]:
        """Continue run ``run_id`` now that all its children have joined."""
        return _advance(self, run_id, root)


def load_spec() -> WorkerSpec:
    """Resolve the worker bootstrap (``$SHELLY_WORKER_BOOTSTRAP`` or the engine's) and call it."""
    path = os.environ.get(BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP)
    module_name, _, attr = path.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr or "worker_spec")
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"worker: cannot load bootstrap {path!r}: {exc}") from exc
    spec = factory()
    if not isinstance(spec, WorkerSpec):
        raise ConfigError(f"worker: bootstrap {path!r} returned {type(spec).__name__}, not a WorkerSpec")
    return spec


def create_worker_app() -> Celery:
    """The app a worker runs: configured from the bootstrap's settings, carrying its spec."""
    spec = load_spec()
    app = create_app(spec.settings)
    app.shelly_spec = spec  # type: ignore[attr-defined]
    app.steps["consumer"].add(BrokerResync)  # a reconnect re-checks the tasks sent before it
    return app


@worker_shutdown.connect
def _close_worker_process(**_: object) -> None:
    WorkerProcess.shutdown()
