"""The faults the chaos suite injects: a private Redis it can pause, kill and restart, and a TCP
proxy in front of a broker whose connections it can cut.

Nothing here touches the machine's shared services: the Redis is a ``redis-server`` of the test's
own (its own port and directory, AOF on, so a restart keeps what was acknowledged), and the broker
cut happens in a proxy the test owns, so RabbitMQ itself never goes down.
"""

from __future__ import annotations

import contextlib
import select
import shutil
import signal
import socket
import subprocess
import threading
from pathlib import Path

import redis

from tests.conftest import free_port
from tests.integration.cluster import wait_until


class RedisServer:
    """A ``redis-server`` owned by one test: AOF with ``appendfsync always``, so ``kill -9`` then
    :meth:`restart` loses nothing that Redis acknowledged."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        if shutil.which("redis-server") is None:
            raise RuntimeError("chaos: redis-server is not installed (apt-get install redis-server)")
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
        wait_until(lambda: self._answers() or self.proc.poll() is not None, 30, f"redis-server on {self.port}")
        if self.proc.poll() is not None:
            raise RuntimeError(f"chaos: redis-server on {self.port} exited:\n"
                               f"{(self.dir / 'redis.log').read_text()[-2000:]}")

    def _answers(self) -> bool:
        try:
            with self.client() as c:
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

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            if self.paused:
                self.resume()
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``target``; :meth:`cut` drops every connection and refuses
    new ones for a while (a network partition between the clients and the broker)."""

    def __init__(self, target: tuple[str, int], port: int | None = None) -> None:
        self.target = target
        self.port = port or free_port()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._open = threading.Event()
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._thread = threading.Thread(target=self._serve, name="chaos-proxy", daemon=True)

    def start(self) -> TcpProxy:
        self._open.set()
        self._thread.start()
        wait_until(lambda: self._listener is not None, 10, f"the proxy on {self.port}", interval=0.01)
        return self

    def _listen(self) -> socket.socket:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(128)
        s.settimeout(0.1)
        return s

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self._open.is_set():
                if self._listener is not None:
                    self._listener.close()
                    self._listener = None
                self._open.wait(0.1)
                continue
            if self._listener is None:
                self._listener = self._listen()
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
        if self._listener is not None:
            self._listener.close()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select([a, b], [], [], 0.2)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    peers[s].sendall(data)
        except (OSError, ValueError):
            return
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.close()

    def cut(self) -> None:
        """Drop every open connection and refuse new ones until :meth:`heal`."""
        self._open.clear()
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def heal(self) -> None:
        self._open.set()

    def stop(self) -> None:
        self.cut()
        self._stop.set()
        self._open.set()
        self._thread.join(5)
