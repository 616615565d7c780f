"""Redis full (``maxmemory`` reached under ``noeviction``): writes are refused with ``OOM``, reads
still answer. A worker waits the refusal out (it never exits), the coordinator says so on stderr and
waits, and the answer is printed once Redis takes writes again (issue 25, item 6).

Redis is this test's own ``redis-server``: ``CONFIG SET maxmemory`` is never sent to the shared one.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cluster import DEFAULT_TIMING, Cluster, scripted, wait_until
from .support.redis_server import RedisServer
from .test_redis_outages import Lines, shelly, waiting_team

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

FULL = 20.0
"""Seconds Redis refuses writes: longer than Celery's retry of a task message and redis-py's own."""


@pytest.fixture
def own(tmp_path: Path) -> Iterator[tuple[RedisServer, Cluster]]:
    server = RedisServer(tmp_path / "redis-data")
    server.start()
    server.client().config_set("maxmemory-policy", "noeviction")
    cluster = Cluster(tmp_path / "project", redis_url=server.url())
    try:
        yield server, cluster
    finally:
        server.client().config_set("maxmemory", "0")
        cluster.stop()
        server.stop()


def fill(server: RedisServer) -> None:
    """Make every write command fail with OOM: a limit below what Redis already uses."""
    server.client().config_set("maxmemory", "1")


def wait_named_full(err: Lines) -> None:
    """Until the coordinator says on stderr that Redis refuses writes; a timeout shows its stderr."""
    try:
        wait_until(lambda: err.first("Redis refuses writes (maxmemory)"), 30, "the coordinator to name Redis full")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- its stderr:\n{err.text()}") from None


def empty(server: RedisServer) -> None:
    server.client().config_set("maxmemory", "0")


def waits_then_answers(server: RedisServer, run: subprocess.Popen[str], err: Lines, answer: Lines) -> None:
    """``shelly run`` names Redis full and waits; given room, it prints the lead's answer."""
    wait_named_full(err)
    assert run.poll() is None, err.text()  # it waits, it does not fail
    empty(server)
    run.wait(60)
    err.join(30)
    answer.join(30)
    assert run.returncode == 0, err.text()
    assert answer.text() == "lead done"
    assert err.first("Redis takes writes again"), err.text()


def test_redis_full_while_a_child_finishes_is_waited_out_and_the_answer_printed(
    own: tuple[RedisServer, Cluster],
) -> None:
    server, cluster = own
    answer_now = waiting_team(cluster)
    cluster.start_worker("w1")
    run = shelly(cluster, "run", "go", "--json")
    try:
        err, answer = Lines(run.stderr), Lines(run.stdout)
        wait_until(lambda: err.first("helper-wait-1 started"), 60, "the child to start on the worker")
        fill(server)
        answer_now.touch()
        wait_named_full(err)
        time.sleep(FULL)  # the fault itself: Redis stays full this long
        assert all(w.poll() is None for w in cluster.workers.values()), cluster.worker_log()
        empty(server)
        run.wait(120)
        assert run.returncode == 0, f"{err.text()}\n{cluster.worker_log()}"
        answer.join(30)
        assert json.loads(answer.text())["reply"] == "lead done"
        assert all(w.poll() is None for w in cluster.workers.values()), cluster.worker_log()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def test_a_root_answer_finished_while_redis_is_full_waits_for_room_and_is_printed(
    own: tuple[RedisServer, Cluster],
) -> None:
    server, cluster = own
    answer_now = cluster.root / "the-lead-may-answer"
    cluster.write_config([scripted(lead=[{"text": "lead done", "until": str(answer_now)}])],
                         [{"name": "lead"}], distributed=DEFAULT_TIMING)
    run = shelly(cluster, "run", "go")
    try:
        err, answer = Lines(run.stderr), Lines(run.stdout)
        wait_until(lambda: err.first("lead started"), 60, "the lead to start")
        fill(server)
        answer_now.touch()
        waits_then_answers(server, run, err, answer)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def test_a_run_started_while_redis_is_full_waits_for_room_and_is_printed(
    own: tuple[RedisServer, Cluster],
) -> None:
    server, cluster = own
    cluster.write_config([scripted(lead=["lead done"])], [{"name": "lead"}], distributed=DEFAULT_TIMING)
    fill(server)
    run = shelly(cluster, "run", "go")
    try:
        err, answer = Lines(run.stderr), Lines(run.stdout)
        waits_then_answers(server, run, err, answer)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
