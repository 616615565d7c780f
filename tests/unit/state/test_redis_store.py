"""What only the Redis implementations promise: session-scoped keys with a TTL, announcements on
the change channels, and the embedded path not importing redis."""

from __future__ import annotations

import subprocess
import sys

import pytest

from shelly_dist.state.redis import RedisStore
from shelly_dist.tasks.redis import RedisBoard
from tests.unit.state.backends import REDIS_BACKENDS, redis_backend


@pytest.mark.parametrize("kind", REDIS_BACKENDS)
async def test_state_and_tasks_live_under_the_session_with_a_ttl(request: pytest.FixtureRequest, kind: str) -> None:
    async with redis_backend(request, kind) as (client, keys):
        await RedisStore(client, keys, session="s9", retention=300).set("k", 1)
        await RedisBoard(client, keys, session="s9", retention=300).create("t")
        for key in (keys.state("s9"), keys.tasks("s9")):
            ttl = await client.ttl(key)
            assert 0 < ttl <= 300, key


@pytest.mark.parametrize("kind", REDIS_BACKENDS)
async def test_sessions_do_not_share_a_blackboard(request: pytest.FixtureRequest, kind: str) -> None:
    async with redis_backend(request, kind) as (client, keys):
        await RedisStore(client, keys, session="one").set("k", 1)
        assert await RedisStore(client, keys, session="two").get("k") is None


def test_importing_the_packages_does_not_import_redis() -> None:
    code = "import sys, shelly_dist.state, shelly_dist.tasks; print('redis' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
