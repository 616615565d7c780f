"""A real Redis Cluster of the suite's own: three ``redis-server --cluster-enabled yes`` nodes, each
on a free port with its cluster bus on another free port (``--cluster-port``) and its own
``--dir`` under the test's tmp directory, joined with ``redis-cli --cluster create`` and always
stopped and reaped.

No fixed ports: several checkouts run their suites on this machine at once, and xdist workers
each start their own cluster (the fixture is session-scoped, per worker process).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .cluster import wait_until
from .own_redis import start_redis_server, stop

NODES = 3


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["redis-cli", *args], capture_output=True, text=True, timeout=timeout, check=False)


def _state_ok(port: int) -> bool:
    return "cluster_state:ok" in _cli("-h", "127.0.0.1", "-p", str(port), "cluster", "info").stdout


@contextmanager
def redis_cluster(tmp: Path) -> Iterator[str]:
    """Start the nodes, create the cluster, wait until every node says ``cluster_state:ok``; yields
    the cluster URL (``redis+cluster://127.0.0.1:<first node's port>``)."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        ports = []
        for _ in range(NODES):
            port, proc = start_redis_server(
                tmp, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "5000", cluster_bus=True)
            ports.append(port)
            procs.append(proc)
        created = _cli("--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
                       "--cluster-replicas", "0", "--cluster-yes")
        assert created.returncode == 0, created.stdout + created.stderr
        wait_until(lambda: all(_state_ok(p) for p in ports), 60, "cluster_state:ok on every node")
        yield f"redis+cluster://127.0.0.1:{ports[0]}"
    finally:
        for proc in procs:
            stop(proc)
