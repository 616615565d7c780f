"""Shared fixtures: a real Redis with a key prefix per test, and a guard against real model calls."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

REDIS_URL = os.environ.get("SHELLY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _redis_answers(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=2).ping())
    except Exception:
        return False


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The real Redis for integration tests; fails (never passes silently) when none answers."""
    if not _redis_answers(REDIS_URL):
        pytest.fail(
            f"no Redis answers at {REDIS_URL}: start one with "
            "`redis-server --daemonize yes --port 6379 --save ''` or set SHELLY_TEST_REDIS_URL"
        )
    return REDIS_URL


@pytest.fixture
def key_prefix(redis_url: str) -> Iterator[str]:
    """A Redis key prefix unique to this test; its keys are deleted afterwards (never FLUSHALL)."""
    import redis

    prefix = f"shelly-test:{uuid.uuid4().hex[:12]}:"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}


@pytest.fixture(autouse=True)
def _no_real_model_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any provider call to a host other than loopback (tests never reach a real LLM API)."""
    from urllib.parse import urlsplit

    from shelly_dist.providers import http, transport

    def check(url: str) -> None:
        if (urlsplit(url).hostname or "") not in LOOPBACK_HOSTS:
            raise AssertionError(f"test tried to call a real model API: {url}")

    def guard(real: Any, at: int = 0) -> Any:
        async def guarded(*args: object, **kwargs: object) -> object:
            check(str(args[at]))
            return await real(*args, **kwargs)
        return guarded

    def guard_stream(real: Any) -> Any:
        def guarded(url: str, *args: object, **kwargs: object) -> object:
            check(url)
            return real(url, *args, **kwargs)
        return guarded

    monkeypatch.setattr(http, "post_json", guard(http.post_json))
    monkeypatch.setattr(http, "post_stream", guard_stream(http.post_stream))  # a watched run's streamed calls
    monkeypatch.setattr(transport, "request", guard(transport.request, at=1))  # the batch APIs' calls


SLOWEST_FIRST = ("tests/chaos/", "tests/integration/", "tests/spec/", "tests/compat/")
"""Test directories, longest tests first: the chaos tests take minutes each, the integration tests
seconds (real workers), the rest milliseconds."""


def _rank(item: pytest.Item) -> int:
    """0 for a test marked ``slow`` (minutes long, wherever it is), then by directory."""
    if item.get_closest_marker("slow") is not None:
        return 0
    return 1 + next((i for i, d in enumerate(SLOWEST_FIRST) if item.nodeid.startswith(d)), len(SLOWEST_FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the long tests first (a stable sort: each directory keeps its order). Under xdist
    (``-n 2``) the scheduler hands out tests in this order, so the minutes-long chaos tests start
    at once on both processes and the many millisecond unit tests fill in at the end, instead of
    one process running a chaos test alone while the other has long finished."""
    items.sort(key=_rank)
