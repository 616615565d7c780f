"""The coordinator (`shelly run` against a real worker) and `shelly events --follow` outlast a
Redis outage while the run waits on its child: Redis paused (SIGSTOP) for longer than redis-py's
retries last, killed and restarted with its AOF, and refusing connections for a while (issue 12,
measured failure 6; DESIGN §3 rule 11). Each ends with the right answer and every process exits.

Redis is this test's own ``redis-server``, state and broker alike (the worker, holding the child's
unacknowledged task, survives its broker going away too), on default runtime settings.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shelly_dist.redisio.keys import Keys

from .cluster import DEFAULT_TIMING, Cluster, complete, delegate, scripted, wait_until
from .support.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

OUTAGE = 15.0
"""Seconds Redis stays away: well past redis-py's own retries (about 3 s). Refusing connections
this long, main's coordinator lost its wake-up pump and never exited."""


@pytest.fixture
def own(tmp_path: Path) -> Iterator[tuple[RedisServer, Cluster]]:
    server = RedisServer(tmp_path / "redis-data")
    server.start()
    cluster = Cluster(tmp_path / "project", redis_url=server.url())
    try:
        yield server, cluster
    finally:
        if server.paused:
            server.resume()
        if not server.answers():
            server.start()
        cluster.stop()
        server.stop()


class Lines:
    """A process's output lines, each stamped with when it arrived (read on a thread)."""

    def __init__(self, stream: object) -> None:
        self.lines: list[tuple[float, str]] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def join(self, timeout: float) -> None:
        """Wait until the stream has ended (the process exited and everything was read)."""
        self._thread.join(timeout)

    def first(self, *contains: str) -> tuple[float, str] | None:
        """The first line holding every one of ``contains``, with when it arrived."""
        return next(((t, line) for t, line in self.lines if all(c in line for c in contains)), None)

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)


def shelly(cluster: Cluster, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "shelly_dist.cli.main", *args], cwd=cluster.root,
                            env=cluster.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def waiting_team(cluster: Cluster) -> Path:
    """A lead that delegates to a helper whose model call ends once the returned path exists."""
    answer_now = cluster.root / "the-child-may-answer"
    cluster.write_config(
        [scripted(lead=[delegate(("helper", "wait for it")), "lead done"],
                  helper=[{**complete("helped with {task}"), "until": str(answer_now)}])],
        [{"name": "lead", "description": "delegates", "options": {"max_delegation_depth": 1}},
         {"name": "helper", "description": "helps"}],
        distributed=DEFAULT_TIMING,
    )
    return answer_now


def pause(server: RedisServer) -> float:
    server.pause()
    time.sleep(OUTAGE)  # the fault itself: Redis stays stopped this long
    server.resume()
    return time.monotonic()


def restart(server: RedisServer) -> float:
    server.kill()
    server.start()
    return time.monotonic()


def refuse(server: RedisServer) -> float:
    server.stop()
    time.sleep(OUTAGE)  # the fault itself: connections are refused this long
    server.start()
    return time.monotonic()


FAULTS: dict[str, Callable[[RedisServer], float]] = {"paused": pause, "restarted": restart, "refusing": refuse}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_waiting_coordinator_and_an_event_follower_outlast_redis(
    own: tuple[RedisServer, Cluster], fault: str
) -> None:
    server, cluster = own
    answer_now = waiting_team(cluster)
    cluster.start_worker("w1")
    run = shelly(cluster, "run", "go", "--json")
    follower: subprocess.Popen[str] | None = None
    try:
        err, answer = Lines(run.stderr), Lines(run.stdout)
        session = wait_until(lambda: err.first("session "), 60, "the session id")[1].split()[1]
        follower = shelly(cluster, "events", "--session", session, "--follow", "--json")
        followed = Lines(follower.stdout)
        wait_until(lambda: followed.first('"run_started"', '"helper-wait-1"'), 60, "the child to start on the worker")

        back = FAULTS[fault](server)  # the outage starts once the child runs and is over before it answers
        answer_now.touch()

        run.wait(120)
        ended = time.monotonic()
        assert run.returncode == 0, f"{err.text()}\n{cluster.worker_log()}"
        err.join(30)
        answer.join(30)
        assert json.loads(answer.text())["reply"] == "lead done"
        assert "✔ helper-wait-1 done on w1@" in err.text(), err.text()
        assert all(w.poll() is None for w in cluster.workers.values()), cluster.worker_log()
        finished = wait_until(lambda: followed.first('"run_finished"', '"helper-wait-1"'), 60,
                              "the follower to see the child finish")
        recovered = err.first("answers again")
        print(f"\n[{fault}] Redis back -> coordinator's reads answered again: "
              f"{'no read failed' if recovered is None else f'{recovered[0] - back:.2f}s'}; "
              f"child finished (seen by the follower) -> run exited: {ended - finished[0]:.2f}s")
        follower.send_signal(signal.SIGINT)
        assert follower.wait(30) == 130, follower.stderr.read() if follower.stderr else ""
    finally:
        for proc in (run, follower):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)


def test_the_cli_watches_outlast_redis_refusing_connections(own: tuple[RedisServer, Cluster]) -> None:
    server, cluster = own
    cluster.write_config([scripted(solo=["x"])], [{"name": "solo"}], distributed=DEFAULT_TIMING)
    session = uuid.uuid4().hex[:16]

    def cli(*args: str) -> str:
        out = cluster.shelly(*args, "--session", session, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout

    task_id = json.loads(cli("tasks", "create", "wait for me"))["id"]
    cli("tasks", "claim", task_id)
    watchers = {"state": shelly(cluster, "state", "watch", "result", "--session", session),
                "tasks": shelly(cluster, "tasks", "watch", task_id, "--session", session)}
    try:
        keys = Keys(cluster.prefix)
        channels = [keys.state_changed(session), keys.tasks_changed(session)]
        wait_until(lambda: all(n == 1 for _, n in cluster.redis.pubsub_numsub(*channels)), 60, "both watches")

        refuse(server)

        cli("state", "set", "result", "42")
        cli("tasks", "update", task_id, "--status", "completed")
        outs = {name: proc.communicate(timeout=60) for name, proc in watchers.items()}
        assert all(proc.returncode == 0 for proc in watchers.values()), outs
        assert json.loads(outs["state"][0])["value"] == 42
        assert json.loads(outs["tasks"][0])["status"] == "completed"
    finally:
        for proc in watchers.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
