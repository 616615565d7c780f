"""Our Redis connections send without a task per command (``redisio/timed_send.py``), and a send that
cannot finish still fails within ``socket_timeout`` as redis-py's does."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from redis.exceptions import TimeoutError as RedisTimeoutError

from shelly_dist.redisio.connection import connect

from .own_redis import start_redis_server, stop

pytestmark = pytest.mark.integration


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="Python 3.12's wait_for needs no task: redis-py's send is kept")
async def test_commands_are_sent_without_wait_for(redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch):
    real = asyncio.wait_for
    calls: list[Any] = []

    async def counting(fut: Any, timeout: float | None) -> Any:  # noqa: ASYNC109 (wait_for's own signature)
        calls.append(timeout)
        return await real(fut, timeout)

    monkeypatch.setattr(asyncio, "wait_for", counting)
    client = connect(redis_url)
    try:
        for i in range(5):
            await client.set(f"{key_prefix}:timed:{i}", "v", ex=60)
        assert [await client.get(f"{key_prefix}:timed:{i}") for i in range(5)] == ["v"] * 5
    finally:
        await client.aclose()
    assert calls == []


async def test_a_send_the_server_never_reads_fails_as_a_write_timeout(tmp_path: Path):
    port, proc = start_redis_server(tmp_path)
    client = connect(f"redis://127.0.0.1:{port}/0", socket_timeout=1.0, retries=0)
    try:
        await client.ping()
        os.kill(proc.pid, signal.SIGSTOP)  # reads nothing more: the socket's buffers fill
        big = "x" * (64 * 1024 * 1024)
        with pytest.raises(RedisTimeoutError, match="Timeout writing to socket"):
            await asyncio.wait_for(client.set("big", big), 30)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        await client.aclose()
        stop(proc)
