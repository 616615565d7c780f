"""The worker's Celery tasks: ``shelly.run_agent`` and ``shelly.resume_agent`` advance a run,
``shelly.team_wake`` starts a team's wake; and the worker's app, carrying its :class:`.WorkerSpec`.

Task names are literal strings (:mod:`~shelly_dist.runtime.celery.names`): moving code never
orphans a message already in a queue. Their keyword arguments (agent, depth, session, preview)
exist for Flower: they are what an operator reads in the task list. Importing this module registers ``shelly_info`` (the
remote-control command of :mod:`.control`) in the worker's main process, so it answers under
every pool.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import time
from typing import Any, NoReturn

from celery import Celery, Task
from celery.signals import task_postrun, task_received, task_revoked, worker_shutdown

from shelly_dist.agent.children import Ending
from shelly_dist.errors import ConfigError, MCPError, StoreError
from shelly_dist.redisio.refusal import refusal
from shelly_dist.runtime.celery.broker import create_app, run_task_sender
from shelly_dist.runtime.celery.children.join import finish_and_join
from shelly_dist.runtime.celery.children.wakes import start_pool_wake
from shelly_dist.runtime.celery.fast_send import shadow_name
from shelly_dist.runtime.celery.journal import Journal, RunEnd
from shelly_dist.runtime.celery.names import RESUME_AGENT, RUN_AGENT
from shelly_dist.runtime.celery.worker import control  # noqa: F401  registers the shelly_info inspect command
from shelly_dist.runtime.celery.worker.process import WorkerProcess, WorkerSpec
from shelly_dist.runtime.celery.worker.resync import BrokerResync
from shelly_dist.runtime.wake import TEAM_WAKE

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


class RunEnded(Exception):
    """A run's task ended its run ``failed`` or ``canceled``: raised so Celery reports the task
    as FAILURE, with the reason (Flower showed a failed or canceled agent run as SUCCESS). Declared
    in the tasks' ``throws``: logged in one line, no traceback; nothing retries it."""


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
    from shelly_dist.redisio.connection import connect

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
                await finish_and_join(journal, enqueue, claim.lease, Ending.FAILED, entry, end=RunEnd(error=error))
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
    _register_tasks(app)
    app.shelly_spec = spec  # type: ignore[attr-defined]
    app.steps["consumer"].add(BrokerResync)  # a reconnect re-checks the tasks sent before it
    return app


@worker_shutdown.connect
def _close_worker_process(**_: object) -> None:
    WorkerProcess.shutdown()


def _renewer() -> Any:
    """This process's lease renewer, once its :class:`WorkerProcess` is open (else ``None``)."""
    process = WorkerProcess._instance
    return process.executor.journal.renewer if process is not None else None


@task_received.connect
def _mark_received(request: Any = None, **_: object) -> None:
    """A run's task message reached this worker: mark it received until its task ends, so a
    ``kill -9`` before the claim costs about a lease, not the broker's visibility timeout
    (:meth:`.Renewer.receive`)."""
    renewer = _renewer()
    # ``type`` is the task's registered name (``name`` is the shadow Flower shows: ``…[agent]``)
    if renewer is None or request is None or request.type not in (RUN_AGENT, RESUME_AGENT):
        return
    args = list(request.args or ())
    if len(args) >= 2:
        renewer.receive(request.id, str(args[1] or args[0]), str(args[0]))


@task_postrun.connect
def _task_ended(task_id: str = "", task: Any = None, **_: object) -> None:
    renewer = _renewer()
    if renewer is not None and getattr(task, "name", "") in (RUN_AGENT, RESUME_AGENT):
        renewer.done(task_id)


@task_revoked.connect
def _task_revoked(request: Any = None, **_: object) -> None:
    renewer = _renewer()
    if renewer is not None and request is not None:
        renewer.done(request.id)
