"""The engine side of a Celery worker: agents per session (the runtime's settings from the config are
:func:`.config_runtime.runtime_settings`, re-exported here).

``shelly worker`` (and ``celery -A shelly_dist.runtime.celery_app``) resolve
:func:`worker_spec` by name (``$SHELLY_WORKER_BOOTSTRAP``), so the runtime layer is handed the
engine at start-up instead of importing it. The config is found the way the CLI finds it:
``$SHELLY_CONFIG``, else ``$SHELLY_DIR/config.yaml`` (``.shelly`` by default); the broker and
Redis URLs may come from ``$SHELLY_BROKER_URL`` / ``$SHELLY_REDIS_URL``.

A worker lives long and sees a new session per item of a distributed batch, so what it keeps per
session is bounded (:data:`SESSION_CACHE_SIZE`, :data:`SESSION_CACHE_TTL`, or
``$SHELLY_WORKER_SESSIONS`` / ``$SHELLY_WORKER_SESSION_TTL``): evicted objects are rebuilt from the
config and Redis on next use.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shelly_dist.agent import Registry
from shelly_dist.engine.config import find_config, fingerprint, load_config
from shelly_dist.engine.config_models import Config
from shelly_dist.engine.config_runtime import runtime_settings
from shelly_dist.errors import ConfigError, StoreError

if TYPE_CHECKING:
    from shelly_dist.engine.engine import Engine
    from shelly_dist.runtime.celery import RuntimeSettings, WorkerSpec
    from shelly_dist.workspace import Workspace

log = logging.getLogger(__name__)

ENV_SHELLY_DIR = "SHELLY_DIR"
ENV_SESSIONS = "SHELLY_WORKER_SESSIONS"
ENV_SESSION_TTL = "SHELLY_WORKER_SESSION_TTL"

SESSION_CACHE_SIZE = 256
"""Sessions a worker keeps agents and store handles for: above the runs one process advances at
once (its ``--concurrency``), so a session in use is rarely rebuilt mid-run."""

SESSION_CACHE_TTL = 600.0
"""Seconds after its last use a session's objects are dropped, so an idle worker shrinks back."""


def session_cache_limits(env: dict[str, str] | None = None) -> tuple[int, float]:
    """(max sessions, idle seconds) from the environment, else the defaults; a bad value is a
    ``ConfigError`` naming the variable."""
    env = dict(os.environ) if env is None else env
    try:
        size = int(env.get(ENV_SESSIONS) or SESSION_CACHE_SIZE)
        ttl = float(env.get(ENV_SESSION_TTL) or SESSION_CACHE_TTL)
    except ValueError as exc:
        raise ConfigError(f"worker: {ENV_SESSIONS}/{ENV_SESSION_TTL}: not a number ({exc})") from exc
    if size < 1 or ttl <= 0:
        raise ConfigError(f"worker: {ENV_SESSIONS} must be at least 1 and {ENV_SESSION_TTL} positive")
    return size, ttl


class EngineContext:
    """What the runtime needs of an open engine on a worker."""

    def __init__(self, engine: Engine, fingerprint: str, settings: RuntimeSettings) -> None:
        from shelly_dist.redisio.connection import connect
        from shelly_dist.runtime.redis_cooldown import RedisCooldownStore
        from shelly_dist.state.governor import RedisGovernorStore
        from shelly_dist.state.spend import RedisSpendLedger

        self.engine = engine
        self.fingerprint = fingerprint
        max_size, ttl = session_cache_limits()
        engine.bound_sessions(max_size=max_size, ttl=ttl)
        # Cooldowns are shared by every worker: a provider cooling down on one is skipped by all.
        self._client = connect(settings.redis_url, client_name="shelly-worker-cooldowns")
        engine.providers.cooldowns = RedisCooldownStore(self._client, prefix=settings.key_prefix)
        # And so are the API keys' accounts: one governor per key for the whole pool.
        engine.providers.governor = RedisGovernorStore(self._client, prefix=settings.key_prefix)
        engine.providers.spend = RedisSpendLedger(self._client, prefix=settings.key_prefix)
        # A model call for a provider batch suspends its run (no slot held); this process works the
        # desks of every provider with a batch API (runtime/celery/children/batch_layer.py, worker/batch_runner.py).
        from shelly_dist.redisio.keys import Keys
        from shelly_dist.runtime.celery.children.batch_layer import PoolBatching

        self.batching = PoolBatching(self._client, Keys(settings.key_prefix), settings.retention)
        engine.providers.pool_batching = self.batching
        engine.providers.build_batch_desks()
        # A team post made on this worker (a channel_send of a run) wakes the agents on the pool.
        from shelly_dist.runtime.celery.children.wakes import PoolWakes

        self.wakes = PoolWakes(settings, due=engine.stores.due_index())
        engine.stores.on_post = self.wakes.on_post
        # Every worker ticks the team schedules; a claim per due time makes each fire once.
        from shelly_dist.runtime.schedules import Scheduler

        # and sweeps the wake checks: a wake whose send was refused or lost is sent again.
        self.scheduler = Scheduler(engine.stores.due_index(), engine.stores.workspace, resend=self._resend)
        self.scheduler.start()
        # A workflow's inline agents: built from the definitions its session keeps in Redis.
        engine.session_config = self.session_config

    async def _resend(self, session: str, agent: str, attempt: int, error: str) -> None:
        await self.wakes.wake(session, agent, attempt, 0.0, error)

    async def session_config(self, session: str) -> Config | None:
        """The worker's config widened by the workflow agents ``session`` keeps (``None`` when it keeps
        none): the definitions are set once per session, so every worker of this config (one
        fingerprint) builds the same agents, and a run resumed elsewhere finds the agent it started
        with. Awaited by :meth:`Engine.registry_async` once per session it caches: one read, of one
        hash field, with the engine's async client, so the other runs of this worker's loop go on
        meanwhile (a synchronous read stalled them all for its round trip, issue 27)."""
        from redis.exceptions import RedisError

        from shelly_dist.engine.workflow import agents_config, parse_agents_spec
        from shelly_dist.tools import control_files

        key = self.engine.stores.keys.workspace(session, "meta")
        try:
            text, source = await self.engine.stores.client().hmget(key, ["agents", "workflow_file"])
        except RedisError as exc:
            raise StoreError(f"worker: cannot read the workflow agents of session {session}: {exc}") from exc
        if source:  # the file the session was started from: no tool of this worker may change it either
            control_files.register(str(source), "the workflow file in use")
        if not text:
            return None
        return agents_config(self.engine.config, parse_agents_spec(str(text)))

    async def registry(self, session: str) -> Registry:
        return await self.engine.registry_async(session)

    def workspace(self, session: str) -> Workspace:
        return self.engine.stores.workspace(session)

    async def wake_ended(self, record: Any, status: str, *, reply: str, error: str) -> None:
        from shelly_dist.runtime.celery.children.wakes import finish_pool_wake

        try:
            await finish_pool_wake(self.workspace(record.session), self.wakes, record, status, reply=reply,
                                   error=error)
        except StoreError:
            raise  # Redis is away: the run's task retries its end from the journal
        except Exception:  # a bug here must not turn the finished run into a failed one
            log.exception("wake %s of %s: closing it failed", record.id, record.agent)

    async def aclose(self) -> None:
        await self.scheduler.aclose()
        await self.engine.aclose()
        await self._client.aclose()


def worker_spec(config_path: str | None = None, shelly_dir: str | None = None) -> WorkerSpec:
    """Load the config and describe the worker; the engine itself opens in the worker's loop."""
    from shelly_dist.runtime import LocalRuntime
    from shelly_dist.runtime.celery import WorkerSpec

    shelly_dir = shelly_dir or os.environ.get(ENV_SHELLY_DIR, ".shelly")
    path = find_config(config_path, shelly_dir)
    config = load_config(path)
    settings = runtime_settings(config)
    fp = fingerprint(config)

    async def open_context() -> EngineContext:
        from shelly_dist.engine.engine import Engine
        from shelly_dist.tools.builtin.ask import SuspendingAnswerer

        # The worker's own engine runs nothing itself: runs are advanced by the executor. A run
        # that asks the user suspends (no slot held) until `shelly answer` resumes it.
        engine = await Engine.open(config, shelly_dir=Path(shelly_dir), runtime=LocalRuntime(),
                                   answerer=SuspendingAnswerer())
        return EngineContext(engine, fp, settings)

    return WorkerSpec(settings=settings, fingerprint=fp, open=open_context)
