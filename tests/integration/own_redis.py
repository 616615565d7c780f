"""A redis-server of the test's own, on a free port, for variants the shared Redis must never be
turned into (a password, an evicting policy, persistence on or off, cluster mode).

Ports are picked free at start (never a fixed set: several checkouts run their suites on one
machine at once); a port taken between the pick and the server's bind is picked again. The server
runs with its own ``--dir`` under the test's tmp_path and is always stopped and reaped.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import free_port

from .cluster import wait_until

REFUSED_PORT = 6449
"""A port nothing of this suite listens on (its servers take ports the kernel hands out, above 32767)."""

ATTEMPTS = 5


def _ready(log: Path) -> bool:
    """Whether the server of ``log`` listens (its own word, so a stranger on the port cannot pass
    for it, and a password cannot hide it)."""
    return "Ready to accept connections" in log.read_text(errors="replace")


def start_redis_server(directory: Path, *args: str, cluster_bus: bool = False) -> tuple[int, subprocess.Popen[bytes]]:
    """Start ``redis-server`` with ``args`` on a free port (and a free cluster bus port with
    ``cluster_bus``), data and log under ``directory``; returns its port once it listens."""
    for _ in range(ATTEMPTS):
        started = _launch(directory, args, cluster_bus)
        if started is not None:
            return started
    raise AssertionError(f"redis-server: no free port after {ATTEMPTS} attempts")


def _launch(directory: Path, args: tuple[str, ...], cluster_bus: bool) -> tuple[int, subprocess.Popen[bytes]] | None:
    """One start on freshly picked ports; None when one was taken in the meantime."""
    port = free_port()
    data = directory / f"redis-{port}"
    data.mkdir(parents=True)
    log = data / "log"
    bus = ["--cluster-port", str(free_port())] if cluster_bus else []
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data), "--save", "",
         "--appendonly", "no", *bus, *args],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )
    try:
        wait_until(lambda: proc.poll() is not None or _ready(log), 30, f"redis-server on {port}")
    except BaseException:
        stop(proc)
        raise
    if proc.poll() is None:
        return port, proc
    assert "Address already in use" in log.read_text(), log.read_text()  # anything else is the test's fault
    return None


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not exited in 10 s; always reaped."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@contextmanager
def own_redis(tmp_path: Path, *args: str) -> Iterator[int]:
    """``redis-server`` with ``args`` (e.g. ``--requirepass x``) on a free port; yields the port."""
    port, proc = start_redis_server(tmp_path, *args)
    try:
        yield port
    finally:
        stop(proc)
