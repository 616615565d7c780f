"""``shelly batch`` on a pool whose Redis restarts without its data mid-batch (no persistence):
the runs it waited for are gone — record, journal, queued task — and each is submitted again, so
every item ends ``completed`` in the output (before, each was written as ``error: run …: not
found``, and a rerun skipped it as done, with exit 0)."""

from __future__ import annotations

import itertools
import json
import shutil

import pytest

from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply

from .cluster import Cluster
from .support.redis_server import RedisServer
from .test_batch_pool import BATCH, model_team, write_items
from .test_batch_scale import reap
from .test_redis_outages import own  # noqa: F401  # the fixture: a Redis of the test's own

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ITEMS = 6
IN_FLIGHT = 15.0
"""Seconds the first model calls take: the runs are in flight while Redis loses them."""


def test_items_whose_runs_redis_lost_run_again_and_each_ends_completed_once(
    own: tuple[RedisServer, Cluster],  # noqa: F811  # the fixture imported above
) -> None:
    server, cluster = own
    calls = itertools.count()

    def respond(req: RecordedRequest) -> Reply:
        # the first calls hold their runs in flight while Redis loses them; the runs again answer at once
        return Reply(text="the answer", delay=IN_FLIGHT if next(calls) < ITEMS else 0.0)

    with ModelServer(format="openai", responder=respond) as models:
        model_team(cluster, models)
        write_items(cluster, ITEMS)
        cluster.start_worker("w1", concurrency=ITEMS)
        batch = cluster.popen(*BATCH)
        try:
            models.wait_for_requests(ITEMS, timeout=90)  # every item's run is in a model call
            server.kill()  # a restart without persistence: everything Redis held is gone
            shutil.rmtree(server.dir / "appendonlydir", ignore_errors=True)
            server.start()
            _, stderr = batch.communicate(timeout=180)
        finally:
            reap(batch)
    assert batch.returncode == 0, f"{stderr[-3000:]}\n{cluster.worker_log()[-3000:]}"
    records = [json.loads(line) for line in (cluster.root / "out.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in records) == sorted(f"item {i}" for i in range(ITEMS)), "each item once"
    assert all(r["status"] == "completed" for r in records), records
    said = " ".join(stderr.split())  # the log line as one (rich wraps it to the terminal's width)
    assert "gone from Redis (restarted without persistence?); submitting it again" in said
