"""``distributed.task_events``: workers send Celery's task events (Flower's task list) only when
asked — ``distributed.task_events: true`` or ``shelly worker -E`` — as Celery's own default."""

from __future__ import annotations

from shelly_dist.cli.worker import celery_argv, worker_command
from shelly_dist.engine.config import parse_config
from shelly_dist.engine.config_runtime import runtime_settings
from shelly_dist.runtime.celery.broker import create_app
from shelly_dist.runtime.celery.settings import RuntimeSettings

CONFIG = """
agents: [{name: a, provider: p}]
providers: [{name: p, kind: scripted, model: m, script: {a: ["hi"]}}]
distributed: {broker_url: "redis://127.0.0.1:6379/5"%s}
"""


def _settings(extra: str = "") -> RuntimeSettings:
    return runtime_settings(parse_config(CONFIG % extra))


def _argv(settings: RuntimeSettings) -> list[str]:
    return celery_argv(settings, pool="threads", loglevel="INFO", queues=None, node="w@h", concurrency=None)


def test_workers_send_no_task_events_by_default():
    settings = _settings()
    assert "--task-events" not in _argv(settings)
    assert create_app(settings).conf.worker_send_task_events is False


def test_task_events_true_turns_them_on_for_flower():
    settings = _settings(", task_events: true")
    assert "--task-events" in _argv(settings)
    assert create_app(settings).conf.worker_send_task_events is True


def test_shelly_worker_takes_dash_e_for_task_events():
    flag = next(p for p in worker_command.params if p.name == "task_events")
    assert {"-E", "--task-events"} <= set(flag.opts)


def test_workers_run_without_gossip_so_none_consumes_the_others_heartbeats():
    argv = _argv(_settings())
    assert "--without-gossip" in argv and "--without-mingle" in argv
    assert "--without-heartbeat" not in argv  # Flower lists workers by their heartbeats
