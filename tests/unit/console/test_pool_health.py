"""The pool backend's health answers 503 while Redis does not answer (what a readiness probe reads)."""

from __future__ import annotations

import time

from aiohttp.test_utils import TestClient, TestServer

from shelly_dist.console import Gate, build_app
from shelly_dist.console.pool import PoolBackend
from shelly_dist.engine.config import fingerprint
from shelly_dist.engine.config_runtime import runtime_settings
from shelly_dist.runtime.celery import open_runtime
from tests.conftest import free_port
from tests.unit.console.conftest import team_config


async def test_health_is_503_while_redis_does_not_answer() -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    config = team_config().model_copy(update={"distributed": team_config().distributed.model_copy(
        update={"broker_url": dead, "redis_url": dead})})
    backend = PoolBackend(config, open_runtime(runtime_settings(config), fingerprint(config)))
    async with TestClient(TestServer(build_app(backend, Gate()))) as client:
        started = time.monotonic()
        response = await client.get("/api/health")
        assert response.status == 503
        assert "the store is not answering" in (await response.json())["error"]
        assert time.monotonic() - started < 60
    await backend.aclose()
