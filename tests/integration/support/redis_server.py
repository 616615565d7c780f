"""A ``redis-server`` a test owns, for fault injection (the chaos suite, the outage tests): paused,
killed, stopped and restarted on its own free port with its own data directory — never the shared
Redis on 6379.

It keeps an append-only file (``appendfsync always``), so a ``kill -9`` then :meth:`start` loses
nothing Redis acknowledged; :meth:`RedisServer.stop` always reaps it, also when a test fails.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import redis

from tests.conftest import free_port
from tests.integration.cluster import wait_until


class RedisServer:
    """A ``redis-server`` owned by one test: AOF with ``appendfsync always``, so ``kill -9`` then
    :meth:`start` loses nothing that Redis acknowledged."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def client(self, db: int = 0) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, db=db, decode_responses=True, socket_timeout=10)

    def start(self) -> None:
        log = (self.dir / "redis.log").open("ab")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
             "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--protected-mode", "no"],
            stdout=log, stderr=subprocess.STDOUT,
        )
        wait_until(lambda: self.answers() or self.proc.poll() is not None, 30, f"redis-server on {self.port}")
        if self.proc.poll() is not None:
            raise RuntimeError(f"redis-server on {self.port} exited:\n"
                               f"{(self.dir / 'redis.log').read_text()[-2000:]}")

    def answers(self) -> bool:
        try:
            with redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1, socket_timeout=1) as c:
                return bool(c.ping())
        except redis.RedisError:
            return False

    def pause(self) -> None:
        """SIGSTOP: connections stay open, nothing answers (a stuck or swapping server)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def kill(self) -> None:
        """``kill -9``: every connection drops, the port refuses until :meth:`start`."""
        if self.proc is not None and self.proc.poll() is None:
            if self.paused:
                self.resume()
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        """A clean shutdown (SIGTERM), reaped: the port refuses connections until :meth:`start`."""
        if self.proc is not None and self.proc.poll() is None:
            if self.paused:
                self.resume()
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
