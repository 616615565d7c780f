"""Fixtures shared by the integration tests: a throwaway cluster, and the extra processes a test
starts in its project directory (both always cleaned up, even when the test fails)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .cluster import Cluster
from .ops import Processes


@pytest.fixture
def cluster(tmp_path: Path, redis_url: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, redis_url=redis_url)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def procs(cluster: Cluster) -> Iterator[Processes]:
    p = Processes(cluster)
    try:
        yield p
    finally:
        p.close()
