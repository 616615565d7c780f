"""``shelly doctor``'s checks: can this config's pool run work, and what is wrong if not.

Each check is one :class:`Check` — a status (ok, warn, fail), what was found, and what to do.
A *fail* means the pool cannot run work as configured: the config does not load, Redis or the
broker does not answer or refuses the credentials, no worker listens on the queue, or a worker
runs another config (it would fail every run it takes with "config fingerprint mismatch"). A
*warn* is something that works today but loses runs on a bad day: a Redis that may evict keys,
or keeps nothing across a restart.

An embedded config (no ``distributed.broker_url``) runs in one process: only the config, and
Redis when ``redis_url`` shares state, are checked. Nothing here writes anything anywhere.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from shelly_dist.engine.config import NO_KEY, find_config, fingerprint, load_config
from shelly_dist.engine.config_models import Config
from shelly_dist.errors import ConfigError

OK = "ok"
WARN = "warn"
FAIL = "fail"

DEFAULT_TIMEOUT = 5.0
"""Seconds each probe (a connection, the workers' replies) may take."""

SAFE_POLICIES = ("noeviction",)
"""``maxmemory-policy`` values that never drop a key. Every shelly key has a TTL, so the
``volatile-*`` policies can evict journals just as ``allkeys-*`` do."""


@dataclass(frozen=True)
class Check:
    """One line of the diagnosis."""

    name: str
    status: str
    detail: str
    fix: str = ""


@dataclass
class Diagnosis:
    """Every check, in the order they ran."""

    checks: list[Check]
    config_failed: bool = False

    @property
    def ok(self) -> bool:
        """No check failed (warnings allowed)."""
        return not any(c.status == FAIL for c in self.checks)

    def as_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [asdict(c) for c in self.checks]}


async def diagnose(config_path: str | None, shelly_dir: str | Path, *, seconds: float = DEFAULT_TIMEOUT) -> Diagnosis:
    """Run every check that applies to the config found from ``config_path``/``shelly_dir``; each
    probe waits at most ``seconds``."""
    checks: list[Check] = []
    try:
        path = find_config(config_path, shelly_dir)
        config = load_config(path)
    except ConfigError as exc:
        checks.append(Check("config", FAIL, str(exc), "fix the config (the message names the field)"))
        return Diagnosis(checks, config_failed=True)
    fp = fingerprint(config)
    agents = f"{len(config.agents)} agent" + ("" if len(config.agents) == 1 else "s")
    checks.append(Check("config", OK, f"{path} loads ({agents}, fingerprint {fp})"))
    checks += [Check("provider", WARN, w.removeprefix("config: ").removesuffix(f" {NO_KEY}"),
                     "export the variable, or put it in .env (the provider's requests carry no key)")
               for w in config.warnings if w.endswith(NO_KEY)]
    checks += await window_checks(config, seconds)
    d = config.distributed
    if not d.broker_url:
        checks.append(Check("broker", OK, "none configured: runs are embedded in the calling process"))
        if d.effective_redis_url():
            checks += await redis_checks(d.effective_redis_url(), seconds)
        return Diagnosis(checks)
    try:
        from shelly_dist.engine.config_runtime import runtime_settings

        settings = runtime_settings(config)
    except ConfigError as exc:
        checks.append(Check("config", FAIL, str(exc), "fix the distributed: section"))
        return Diagnosis(checks, config_failed=True)
    redis = await redis_checks(settings.redis_url, seconds)
    checks += redis
    broker = await broker_check(settings.broker_url, seconds)
    checks.append(broker)
    if broker.status == FAIL:
        checks.append(Check("workers", FAIL, "not checked: the broker does not answer",
                            "fix the broker first"))
    else:
        checks += await worker_checks(config, settings, fp, seconds)
    return Diagnosis(checks)


async def window_checks(config: Config, seconds: float) -> list[Check]:
    """Each OpenAI-compatible server of its own whose config sets no ``context_window``: the window
    it says it runs with (what the effects will compare with), or a warning that it says none."""
    from shelly_dist.providers import aclose_http_client
    from shelly_dist.providers.openai import OpenAICompleter

    checks: list[Check] = []
    try:
        for provider in config.providers:
            if not config.learns_window(provider):
                continue
            probe = OpenAICompleter(model=provider.model, name=provider.name, base_url=provider.base_url,
                                    api_key=provider.api_key, headers=provider.headers or None)
            try:
                tokens = await asyncio.wait_for(probe.server_window(), seconds)
            except (TimeoutError, OSError):
                tokens = None
            if tokens:
                checks.append(Check("context window", OK, f'provider "{provider.name}": {tokens} tokens, read '
                                                          "from the server (the config sets no context_window)"))
            else:
                default = config.context_window(provider)
                checks.append(Check("context window", WARN,
                                    f'provider "{provider.name}": the server at {provider.base_url} does not say '
                                    f"its context window; {default} tokens are assumed until an overflow error "
                                    "says it", "set the provider's context_window to the server's context size"))
    finally:
        await aclose_http_client()
    return checks


async def redis_checks(url: str, seconds: float) -> list[Check]:
    """Reachable and authenticated (fail otherwise), then eviction policy and persistence (warn)."""
    from shelly_dist.redisio.server import AUTH, UNREACHABLE, probe_redis

    probe = await probe_redis(url, seconds=seconds)
    if probe.problem == UNREACHABLE:
        return [Check("redis", FAIL, f"cannot connect to {probe.url}: {probe.error}",
                      "start Redis, or fix distributed.redis_url / SHELLY_REDIS_URL (host and port)")]
    if probe.problem == AUTH:
        return [Check("redis", FAIL, f"{probe.url} refused the credentials: {probe.error}",
                      "put the right password in the URL (redis://:PASSWORD@host:6379/0, or "
                      "redis://USER:PASSWORD@host for an ACL user)")]
    if probe.problem:
        return [Check("redis", FAIL, f"{probe.url}: {probe.error}",
                      "grant the user INFO and CONFIG GET, or check the server's log")]
    checks = [Check("redis", OK, f"Redis {probe.version} at {probe.url}")]
    checks.append(_eviction(probe.maxmemory_policy, probe.config_error))
    checks.append(_persistence(probe.aof_enabled, probe.rdb_enabled, probe.config_error))
    return checks


def _eviction(policy: str | None, config_error: str) -> Check:
    if policy is None:
        return Check("redis eviction", WARN, f"maxmemory-policy unknown (CONFIG GET refused: {config_error})",
                     "make sure the server's maxmemory-policy is noeviction (your provider's settings)")
    if policy in SAFE_POLICIES:
        return Check("redis eviction", OK, f"maxmemory-policy {policy}: keys are never evicted")
    return Check("redis eviction", WARN,
                 f"maxmemory-policy {policy} may evict run journals under memory pressure (every shelly key "
                 "has a TTL, so volatile-* policies evict them too)",
                 "CONFIG SET maxmemory-policy noeviction (and in redis.conf), or give Redis its own instance")


def _persistence(aof: bool, rdb: bool | None, config_error: str) -> Check:
    if aof:
        return Check("redis persistence", OK, "AOF on: runs survive a Redis restart")
    if rdb:
        return Check("redis persistence", OK, "RDB snapshots on: a restart loses at most the writes since the "
                     "last snapshot (AOF loses less)")
    if rdb is None:
        return Check("redis persistence", WARN, f"AOF off, RDB unknown (CONFIG GET refused: {config_error})",
                     "turn on AOF (appendonly yes) or RDB snapshots in your provider's settings")
    return Check("redis persistence", WARN, "neither AOF nor RDB is on: a Redis restart loses every run",
                 "CONFIG SET appendonly yes (and appendonly yes in redis.conf)")


async def broker_check(url: str, seconds: float) -> Check:
    """The broker answers and accepts the credentials (Redis or AMQP)."""
    from shelly_dist.redisio.server import AUTH, probe_redis, redact

    if url.startswith(("redis://", "rediss://", "unix://")):
        probe = await probe_redis(url, seconds=seconds)
        problem, error = probe.problem, probe.error
    elif url.startswith(("amqp://", "amqps://", "pyamqp://")):
        from shelly_dist.runtime.celery.client.workers import probe_amqp

        answer = await asyncio.to_thread(probe_amqp, url, timeout=seconds)
        problem, error = answer.problem, answer.error
    else:
        return Check("broker", WARN, f"{redact(url)}: not checked (only Redis and AMQP brokers are)")
    shown = redact(url)
    if not problem:
        return Check("broker", OK, f"{shown} answers")
    if problem == AUTH:
        return Check("broker", FAIL, f"{shown} refused the credentials: {error}",
                     "fix the user and password in distributed.broker_url / SHELLY_BROKER_URL")
    return Check("broker", FAIL, f"cannot connect to {shown}: {error}",
                 "start the broker, or fix distributed.broker_url / SHELLY_BROKER_URL")


async def worker_checks(config: Config, settings: Any, fp: str, seconds: float) -> list[Check]:
    """One line per worker consuming the queue; fail when there is none, or one runs another config."""
    from shelly_dist.runtime.celery.client.workers import list_workers

    queue = settings.queue
    try:
        workers = await asyncio.to_thread(list_workers, settings, timeout=seconds)
    except Exception as exc:  # the broadcast failed after the broker answered: report, don't crash
        return [Check("workers", FAIL, f"cannot ask the workers: {type(exc).__name__}: {exc}",
                      "check the broker's log")]
    listening = [w for w in workers if queue in w.queues]
    if not listening:
        others = f" ({len(workers)} other workers answered, on other queues)" if workers else ""
        return [Check("workers", FAIL, f"no worker listens on queue {queue!r}{others}",
                      "start one with this config: shelly worker (same config file and queue)")]
    checks: list[Check] = []
    for w in listening:
        what = f"{w.name}: concurrency {w.concurrency if w.concurrency is not None else '?'}"
        what += f", pool {w.pool}" if w.pool else ""
        if w.error or not w.fingerprint:
            checks.append(Check("worker", WARN, f"{what}; did not report its config ({w.error or 'no fingerprint'})",
                                "upgrade the worker to this shelly version"))
        elif w.fingerprint != fp:
            checks.append(Check("worker", FAIL,
                                f"{what}; config fingerprint {w.fingerprint} differs from this config's {fp}: "
                                "it fails every run it takes",
                                "restart the worker with this config (or run doctor with the worker's config)"))
        else:
            checks.append(Check("worker", OK, f"{what}; same config ({fp})"))
    return checks
