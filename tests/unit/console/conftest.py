"""The console's app over a real in-process backend: an engine with a scripted team, served by
aiohttp's test server on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from shelly_dist.console import Gate, build_app
from shelly_dist.console.local import LocalBackend
from shelly_dist.engine import Engine
from shelly_dist.engine.config_models import Config


def team_config(**scripts: list[Any]) -> Config:
    """``lead`` delegates ``one`` and ``two`` to ``helper`` (scripts may be replaced per agent)."""
    script = {
        "lead": [{"tool_calls": [{"name": "delegate", "arguments": {"tasks": [
            {"agent": "helper", "task": "one", "context": ""}, {"agent": "helper", "task": "two", "context": ""}]}}]},
            "lead done"],
        "helper": [{"tool_calls": [{"name": "task_complete",
                                    "arguments": {"status": "completed", "summary": "helped {task}"}}]}],
        **scripts,
    }
    return Config.model_validate({
        "providers": [{"name": "team", "kind": "scripted", "model": "script", "script": script}],
        "agents": [{"name": "lead", "description": "delegates", "options": {"max_delegation_depth": 1}},
                   {"name": "helper", "description": "helps"}],
    })


Open = Callable[..., Any]


@pytest.fixture
async def console(tmp_path: Path) -> AsyncIterator[Open]:
    """``await console(gate=…, config=…)`` → an aiohttp test client of the console (closed after)."""
    opened: list[Any] = []

    async def open_console(gate: Gate | None = None, config: Config | None = None,
                           keepalive: float = 15.0) -> TestClient[Any, Any]:
        engine = await Engine.open(config or team_config(), shelly_dir=tmp_path / ".shelly")
        backend = LocalBackend(engine)
        client: TestClient[Any, Any] = TestClient(TestServer(build_app(backend, gate or Gate(), keepalive=keepalive)))
        opened.append((client, backend, engine))
        await client.start_server()
        return client

    yield open_console
    for client, backend, engine in reversed(opened):
        await client.close()
        await backend.aclose()
        await engine.aclose()
