"""The worker's health signal: a file the worker rewrites every few seconds, read by probes.

Why a file and not ``celery inspect ping``: a ping goes through the broker, so a slow or
unreachable Redis makes every worker look dead at once and the orchestrator restarts the whole
fleet, losing in-flight steps; a ping also needs the Celery app imported in the probe (seconds of
CPU per probe). A heartbeat file answers one local question, "is this process still ticking?", in
milliseconds and with no network. The file is replaced atomically (write a temp file in the same
directory, then ``os.replace``), so a probe never reads half a record.

An optional ``probe`` callable lets the worker tie the beat to something deeper than "the thread
runs" (for instance "the event loop answered within a second"): while it returns False or raises,
the file is not refreshed and goes stale, so liveness fails after ``max_age``.

Entry point for probes (Docker HEALTHCHECK, Kubernetes exec probes, compose healthcheck)::

    python -m shelly_dist.runtime.heartbeat --file /tmp/shelly-worker.heartbeat --max-age 60

exits 0 when the file is fresh, 1 otherwise with the reason on stderr. No celery or redis import.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

logger = logging.getLogger(__name__)

ENV_HEARTBEAT_FILE = "SHELLY_HEARTBEAT_FILE"
DEFAULT_HEARTBEAT_FILE = "/tmp/shelly-worker.heartbeat"
DEFAULT_INTERVAL = 10.0
"""Seconds between beats; probes use a max age of several intervals (60 s in the shipped manifests)."""
DEFAULT_MAX_AGE = 60.0


def default_path() -> str:
    """``$SHELLY_HEARTBEAT_FILE``, else :data:`DEFAULT_HEARTBEAT_FILE`."""
    return os.environ.get(ENV_HEARTBEAT_FILE) or DEFAULT_HEARTBEAT_FILE


def write_beat(path: str | os.PathLike[str], now: float | None = None) -> None:
    """Atomically replace ``path`` with ``{"ts", "pid", "hostname"}``. Blocking file I/O."""
    target = Path(path)
    record = {"ts": time.time() if now is None else now, "pid": os.getpid(), "hostname": socket.gethostname()}
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record, f)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check(path: str | os.PathLike[str], max_age: float, now: float | None = None) -> tuple[bool, str]:
    """``(ok, reason)``: whether ``path`` holds a beat at most ``max_age`` seconds old.

    Never raises: a missing, unreadable or malformed file is a failed check with its reason.
    """
    now = time.time() if now is None else now
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        ts = float(record["ts"])
    except FileNotFoundError:
        return False, f"heartbeat: no heartbeat file at {path} (worker not started, or not writing it)"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return False, f"heartbeat: unreadable heartbeat file {path}: {exc}"
    age = now - ts
    who = f"pid {record.get('pid', '?')} on {record.get('hostname', '?')}"
    if age > max_age:
        return False, f"heartbeat: stale: last beat {age:.1f}s ago (max {max_age:g}s) from {who}"
    return True, f"heartbeat: ok: last beat {age:.1f}s ago from {who}"


class Heartbeat:
    """A daemon thread that rewrites the heartbeat file every ``interval`` seconds.

    ``start()`` writes the first beat before returning (so readiness can pass at once) and is
    called once, at worker boot; ``stop()`` ends the thread and removes the file, so a stopped
    worker never looks alive. Both are idempotent. A failed write is logged and retried on the
    next tick; it never kills the thread.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        interval: float = DEFAULT_INTERVAL,
        probe: Callable[[], bool] | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"heartbeat: interval must be positive, got {interval}")
        self.path = Path(path if path is not None else default_path())
        self.interval = interval
        self._probe = probe
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> bool:
        """Write one beat if the probe (if any) says healthy; returns whether it was written."""
        try:
            if self._probe is not None and not self._probe():
                logger.warning("heartbeat: probe reported unhealthy; not refreshing %s", self.path)
                return False
            write_beat(self.path)
            return True
        except Exception:
            logger.exception("heartbeat: could not refresh %s", self.path)
            return False

    def start(self) -> None:
        if self._thread is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.beat()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="shelly-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.beat()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        thread.join()
        self.path.unlink(missing_ok=True)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> Heartbeat:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """The probe: exit 0 when the heartbeat is fresh, 1 otherwise (reason on stderr)."""
    parser = argparse.ArgumentParser(
        prog="python -m shelly_dist.runtime.heartbeat",
        description="Check a shelly worker's heartbeat file (for liveness and readiness probes).",
    )
    file_help = f"heartbeat file (default ${ENV_HEARTBEAT_FILE} or {DEFAULT_HEARTBEAT_FILE})"
    parser.add_argument("--file", default=None, help=file_help)
    parser.add_argument("--max-age", type=float, default=DEFAULT_MAX_AGE, help="seconds a beat stays valid")
    parser.add_argument("--verbose", action="store_true", help="print the reason on stderr on success too")
    args = parser.parse_args(argv)
    ok, reason = check(args.file or default_path(), args.max_age)
    if not ok or args.verbose:
        print(reason, file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
