"""Fixtures shared by the integration tests: a throwaway cluster, and the extra processes a test
starts in its project directory (both always cleaned up, even when the test fails)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .cluster import Cluster
from .ops import Processes
from .redis_cluster import redis_cluster


@pytest.fixture
def cluster(tmp_path: Path, redis_url: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, redis_url=redis_url)
    try:
        yield c
    finally:
        c.stop()


RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672//"


@pytest.fixture
def rabbit_cluster(tmp_path: Path, redis_url: str) -> Iterator[Cluster]:
    from kombu import Connection

    try:
        with Connection(RABBITMQ_URL, connect_timeout=5) as conn:
            conn.ensure_connection(max_retries=1)
    except Exception as exc:
        pytest.fail(f"no RabbitMQ answers at {RABBITMQ_URL} ({exc}); start it with `rabbitmq-server -detached`")
    c = Cluster(tmp_path, redis_url=redis_url, broker_url=RABBITMQ_URL)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(params=["redis", "rabbitmq"])
def any_broker_cluster(request: pytest.FixtureRequest) -> Cluster:
    """The same test on the Redis broker and on RabbitMQ."""
    return request.getfixturevalue("cluster" if request.param == "redis" else "rabbit_cluster")


@pytest.fixture
def procs(cluster: Cluster) -> Iterator[Processes]:
    p = Processes(cluster)
    try:
        yield p
    finally:
        p.close()


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real three-node Redis Cluster of this suite's own (on free ports), for the whole session."""
    with redis_cluster(tmp_path_factory.mktemp("redis-cluster")) as url:
        yield url
