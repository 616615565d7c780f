"""A ``redis-server`` a test owns, for fault injection: paused, killed, stopped and restarted on
its own port with its own data directory — never the shared Redis on 6379.

It keeps an append-only file (``appendfsync always``, so a kill loses nothing acknowledged), and
:meth:`FaultyRedis.close` always reaps the server, also when a test fails.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
from pathlib import Path

import redis

from .cluster import wait_until

PORTS = range(6391, 6400)
"""The ports this branch's tests may use (each engineer has their own range on this machine)."""


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class FaultyRedis:
    def __init__(self, root: Path) -> None:
        self.dir = root / "redis-data"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = next((p for p in PORTS if _free(p)), 0)
        if not self.port:
            raise AssertionError(f"no free port in {PORTS.start}-{PORTS.stop - 1} for a redis-server")
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    def start(self) -> None:
        """Start (or restart) the server and wait until it answers, its AOF loaded."""
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
             "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--logfile", "redis.log"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_until(self.answers, 30, f"redis-server on {self.port}")

    def answers(self) -> bool:
        client = redis.Redis(port=self.port, socket_connect_timeout=1, socket_timeout=1)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def kill(self) -> None:
        """``kill -9``: no shutdown, only what the AOF already holds survives."""
        self._end(signal.SIGKILL)

    def stop(self) -> None:
        """A clean shutdown; until :meth:`start`, connections are refused."""
        self._end(signal.SIGTERM)

    def _end(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        if self.paused:
            self.resume()
        self.proc.send_signal(sig)
        self.proc.wait(30)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self.kill()
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
