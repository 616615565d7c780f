"""A real Redis Cluster of the suite's own: three ``redis-server --cluster-enabled yes`` nodes on
ports 7101-7103, or 7104-7106 when those are taken (their cluster bus on port + 10000), each with
its own ``--dir`` under the test's tmp directory, joined with ``redis-cli --cluster create`` and
always stopped and reaped.

Only this module starts servers on these ports, one cluster per test session (a session-scoped
fixture); a second suite running at once on the machine takes the other set, and when both sets
are taken the fixture fails at once instead of joining a stranger's node.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .cluster import wait_until

PORT_SETS = ((7101, 7102, 7103), (7104, 7105, 7106))
"""The node ports a cluster may use (the cluster bus uses each port + 10000)."""


def _taken(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["redis-cli", *args], capture_output=True, text=True, timeout=timeout, check=False)


def _state_ok(port: int) -> bool:
    return "cluster_state:ok" in _cli("-h", "127.0.0.1", "-p", str(port), "cluster", "info").stdout


@contextmanager
def redis_cluster(tmp: Path) -> Iterator[str]:
    """Start the nodes, create the cluster, wait until every node says ``cluster_state:ok``; yields
    the cluster URL (``redis+cluster://127.0.0.1:7101``)."""
    free = [ports for ports in PORT_SETS if not any(_taken(p) or _taken(p + 10000) for p in ports)]
    assert free, f"redis cluster: every port of {PORT_SETS} is taken (left over from another run?)"
    ports = free[0]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for port in ports:
            data = tmp / f"cluster-{port}"
            data.mkdir(parents=True)
            procs.append(subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
                 "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--cluster-node-timeout", "5000", "--save", "", "--appendonly", "no"],
                stdout=(data / "log").open("wb"), stderr=subprocess.STDOUT,
            ))
        for port, proc in zip(ports, procs, strict=True):
            wait_until(lambda p=port, pr=proc: _taken(p) or pr.poll() is not None, 30, f"redis-server on {port}")
            assert proc.poll() is None, (tmp / f"cluster-{port}" / "log").read_text()
        created = _cli("--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
                       "--cluster-replicas", "0", "--cluster-yes")
        assert created.returncode == 0, created.stdout + created.stderr
        wait_until(lambda: all(_state_ok(p) for p in ports), 60, "cluster_state:ok on every node")
        yield f"redis+cluster://127.0.0.1:{ports[0]}"
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
