"""The coordinator in-process against the real Redis, with no workers at all."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid

import pytest

from shelly_dist import Message, Role
from shelly_dist.runtime.celery import CeleryRuntime, RuntimeSettings
from shelly_dist.runtime.celery import coordinator as coordinator_module

from .support.pyteam import build_registry

pytestmark = pytest.mark.integration


class Heard(logging.Handler):
    """Remembers warnings and signals the first one."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        self.first = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        self.first.set()


async def test_a_coordinator_whose_children_never_start_says_why_it_waits(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(coordinator_module, "NO_WORKER_HINT", 0.2)
    queue = f"nobody-listens-{uuid.uuid4().hex[:6]}"
    settings = RuntimeSettings(broker_url=redis_url.rsplit("/", 1)[0] + "/5", redis_url=redis_url, queue=queue,
                               key_prefix=key_prefix, poll_interval=0.1)
    team = {"lead": {"replies": [{"tool_calls": [{"name": "delegate", "arguments": {"tasks": [
        {"agent": "helper", "task": "t", "context": ""}]}}]}, "never"], "max_delegation_depth": 1},
        "helper": {"replies": ["x"]}}
    runtime = CeleryRuntime(settings, "fp")
    agent = build_registry(team).spawn("lead")
    heard = Heard()
    log = logging.getLogger(coordinator_module.__name__)
    log.addHandler(heard)
    run = asyncio.create_task(runtime.execute(agent, [Message.text("user", Role.USER, "go")], session="0" * 16))
    try:
        assert await asyncio.to_thread(heard.first.wait, 30), "no warning within 30 s"
        assert "no worker has started any of 1 children" in heard.messages[0] and queue in heard.messages[0]
        assert not run.done()
    finally:
        log.removeHandler(heard)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        import redis

        broker = redis.Redis.from_url(settings.broker_url)
        broker.delete(queue)
        broker.close()
        await runtime.aclose()
