"""bench.cluster: which servers of a cluster hold the journals, and when a cluster URL is refused."""

from __future__ import annotations

import pytest

from bench.cluster import primaries, refuse_cluster
from bench.procs import BenchError

NODES = """\
07c37dfeb2352e0b 127.0.0.1:30004@31004,host-a slave e7d1eecce10fd6bb 0 1426238317239 4 connected
67ed2db8d677e59e 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5 127.0.0.1:30003@31003 master - 0 1426238318243 3 connected 10923-16383
6ec23923021cf3ff 127.0.0.1:30007@31007 master,fail - 1426238316232 1426238316232 7 disconnected 1-2
e7d1eecce10fd6bb 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460
824fe116063bc5fc 127.0.0.1:30009@31009 master - 0 1426238317741 9 connected
"""


def test_primaries_are_the_masters_serving_slots_sorted_by_address():
    assert primaries(NODES) == [("127.0.0.1", 30001), ("127.0.0.1", 30002), ("127.0.0.1", 30003)]


def test_a_primary_without_a_host_is_on_loopback():
    assert primaries("e7d1eecce10fd6bb :7000@17000 myself,master - 0 0 1 connected 0-16383\n") == [
        ("127.0.0.1", 7000)]


def test_a_cluster_url_is_refused_naming_the_scenario_and_why():
    with pytest.raises(BenchError, match=r"bench: commands: .*Redis Cluster.*MONITOR"):
        refuse_cluster("redis+cluster://127.0.0.1:7000", "commands", "MONITOR of one server")


def test_a_single_redis_url_is_not_refused():
    refuse_cluster("redis://127.0.0.1:6379/0", "commands", "MONITOR of one server")


def test_a_cluster_without_a_broker_of_its_own_is_refused(monkeypatch: pytest.MonkeyPatch):
    from bench import harness

    monkeypatch.setattr(harness, "REDIS_URL", "redis+cluster://127.0.0.1:7000")
    monkeypatch.delenv("BENCH_BROKER_URL", raising=False)
    with pytest.raises(BenchError, match="BENCH_BROKER_URL is required when BENCH_REDIS_URL is a cluster"):
        harness.broker_url()
