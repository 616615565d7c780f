"""A TCP proxy a test owns, in front of a broker (or Redis): :meth:`TcpProxy.cut` drops every
connection and refuses new ones until :meth:`TcpProxy.heal` — a network partition between the
clients and the server, without touching the shared server itself."""

from __future__ import annotations

import contextlib
import select
import socket
import threading

from tests.conftest import free_port
from tests.integration.cluster import wait_until


class TcpProxy:
    """Forwards ``127.0.0.1:port`` (a free one unless given) to ``target``."""

    def __init__(self, target: tuple[str, int], port: int | None = None) -> None:
        self.target = target
        self.port = port or free_port()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._open = threading.Event()
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._thread = threading.Thread(target=self._serve, name="test-proxy", daemon=True)

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
            with self._lock:
                if self._open.is_set() and self._listener is None:
                    self._listener = self._listen()
                listener = self._listener
            if listener is None:
                self._open.wait(0.1)
                continue
            try:
                client, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                if not self._open.is_set():  # cut while this one was being accepted: refused too
                    client.close()
                    upstream.close()
                    continue
                self._conns += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
        self._close_listener()

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

    def _close_listener(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()

    def cut(self) -> None:
        """Drop every open connection and refuse new ones (at once) until :meth:`heal`."""
        with self._lock:
            self._open.clear()
            conns, self._conns = self._conns, []
        self._close_listener()
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
