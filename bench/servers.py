"""Private redis-servers for the bench (``--scale``'s own server, ``python -m bench.cluster``'s
nodes and broker), and the one reading of a server's CPU that every row reports."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import redis

from bench.procs import BenchError

START_DEADLINE = 30.0
"""Seconds a redis-server may take to say it accepts connections."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis_server(directory: Path, *args: str) -> tuple[int, subprocess.Popen[bytes]]:
    """``redis-server`` with ``args`` on a free port, data and log in ``directory/<port>``;
    returns once its log says it accepts connections (``BenchError`` with the log's tail if not)."""
    port = free_port()
    data = directory / str(port)
    data.mkdir()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
                             "--save", "", "--appendonly", "no", *args],
                            stdout=(data / "log").open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_DEADLINE
    while "Ready to accept connections" not in (data / "log").read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise BenchError(f"bench: redis-server on {port} did not start: "
                             f"{(data / 'log').read_text(errors='replace')[-500:]}")
        time.sleep(0.05)
    return port, proc


def redis_cpu(client: redis.Redis) -> float:
    """User + system CPU seconds the server of ``client`` has used so far (``INFO cpu``)."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
