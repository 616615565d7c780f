"""A redis-server of the test's own, on one of this suite's ports, for variants the shared Redis
must never be turned into (a password, an evicting policy, persistence on or off).

It runs with its own ``--dir`` under the test's tmp_path and is always stopped and reaped.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .cluster import wait_until

PORTS = range(6441, 6449)
"""The ports this suite may start Redis on (6449 is kept free as a refused port)."""
REFUSED_PORT = 6449


def _free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@contextmanager
def own_redis(tmp_path: Path, *args: str) -> Iterator[int]:
    """``redis-server`` with ``args`` (e.g. ``--requirepass x``) on a free port of :data:`PORTS`."""
    port = next((p for p in PORTS if _free(p)), None)
    assert port is not None, f"every port in {PORTS} is taken"
    data = tmp_path / f"redis-{port}"
    data.mkdir()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data), "--save", "",
         "--appendonly", "no", *args],
        stdout=(data / "log").open("wb"), stderr=subprocess.STDOUT,
    )
    try:
        wait_until(lambda: not _free(port) or proc.poll() is not None, 30, f"redis-server on {port}")
        assert proc.poll() is None, (data / "log").read_text()
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
