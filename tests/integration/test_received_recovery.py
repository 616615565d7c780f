"""A run task a worker had *received* (reserved, held for a retry's countdown, popped and not yet
claimed) when it was ``kill -9``-ed is sent again within about ``lease + reap_interval`` on
default settings — the consumers' ledger (``runtime/celery/worker/ledger.py``, issue 41) — not
after the Redis broker's visibility timeout (660 s); on RabbitMQ too, where the dead connection's
unacknowledged messages return at once and the ledger's re-send is a duplicate its claim drops.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import pytest

from shelly_dist.state import Keys
from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply

from .cluster import Cluster, delegate, scripted, wait_until
from .keys import assert_all_keys_have_ttl
from .test_batch_pool import BATCH, model_team, write_items
from .test_batch_scale import item_of, lines_in, reap
from .test_policy_pool import agent_of, mock

pytestmark = pytest.mark.integration

RECOVERY_LIMIT = 45.0
"""Seconds (default settings) within which the kill may delay anything: lease 10 s + reap interval
2 s + the re-sent task's way, with room for a loaded 2-core machine."""


def ledger_runs(cluster: Cluster) -> dict[str, int]:
    """Every run id in any worker's ledger, with how many of its messages are held."""
    keys = Keys(cluster.prefix)
    held: Counter[str] = Counter()
    for key in cluster.redis.scan_iter(match=keys.ledger("*").replace("{", "\\{").replace("}", "\\}")):
        for field, count in cluster.redis.hgetall(key).items():
            held[field.split(" ", 1)[0]] += int(count)
    return dict(held)


@pytest.mark.timeout(240)
def test_a_task_held_for_its_retry_by_a_killed_worker_runs_within_seconds(any_broker_cluster: Cluster):
    cluster = any_broker_cluster
    first_in = threading.Event()

    def respond(req: RecordedRequest) -> Reply | None:
        if agent_of(req) == "w" and not first_in.is_set():
            first_in.set()
            return Reply(text="never in time", delay=120)  # job a holds w's only slot; its worker dies in it
        return Reply(text="job done")

    with ModelServer(format="openai", responder=respond) as server:
        cluster.write_config(
            [scripted("lead", lead=[delegate(("w", "job a"), ("w", "job b")), "all done"]), mock(server)],
            [{"name": "lead", "provider": "lead", "options": {"max_delegation_depth": 1}},
             {"name": "w", "provider": "mock", "max_concurrency": 1}],
        )
        victim = cluster.start_worker("victim")
        coordinator = cluster.popen("run", "two jobs", "--json")
        try:
            wait_until(first_in.is_set, 60, "job a holding w's only slot")
            session = cluster.session_ids()[0]

            def job_b_held() -> str | None:
                waiting = [r for r in cluster.runs(session) if r.get("parent") and r.get("status") == "queued"]
                held = ledger_runs(cluster)
                return next((r["id"] for r in waiting if held.get(r["id"], 0) > 0), None)

            # job b bounces off the full slot (a retry with a countdown): its message sits in the
            # victim, received and unclaimed
            job_b = wait_until(job_b_held, 60, "job b's task held by the victim, unclaimed")
            cluster.kill_worker(victim)
            killed = time.monotonic()
            cluster.start_worker("survivor")
            out, err = coordinator.communicate(timeout=RECOVERY_LIMIT + 30)
            took = time.monotonic() - killed
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
                coordinator.wait(10)
        assert coordinator.returncode == 0, f"{out}\n{err}\n{cluster.worker_log()}"
        assert json.loads(out)["reply"] == "all done"
        assert took < RECOVERY_LIMIT, f"the run ended {took:.0f}s after the kill\n{cluster.worker_log()}"
        b_asks = [r for r in server.requests if agent_of(r) == "w" and "job b" in json.dumps(r.body)]
        assert len(b_asks) == 1, "job b ran once"
        records = {r["id"]: r for r in cluster.runs(session)}
        assert records[job_b]["status"] == "done"
    assert_all_keys_have_ttl(cluster.redis, cluster.prefix)


ITEMS = 300
KILL_AT = 100


@pytest.mark.timeout(300)
def test_a_batch_with_a_worker_killed_mid_way_finishes_every_item_once_within_seconds_of_the_kill(
    any_broker_cluster: Cluster,
):
    cluster = any_broker_cluster
    with ModelServer(format="openai", default=Reply(text="the answer", delay=0.05)) as server:
        model_team(cluster, server)
        write_items(cluster, ITEMS)
        first, _ = cluster.start_workers("w1", "w2", concurrency=16)
        output = cluster.root / "out.jsonl"
        batch = cluster.popen(*BATCH)
        try:
            wait_until(lambda: lines_in(output) >= KILL_AT or batch.poll() is not None, 120, f"{KILL_AT} items done")
            cluster.kill_worker(first)
            killed = time.monotonic()
            cluster.start_worker("w3", concurrency=16)
            _, stderr = batch.communicate(timeout=RECOVERY_LIMIT + 60)
            took = time.monotonic() - killed
        finally:
            reap(batch)
        assert batch.returncode == 0, f"{stderr[-3000:]}\n{cluster.worker_log()}"
        records = [json.loads(line) for line in output.read_text().splitlines()]
        assert Counter(r["id"] for r in records) == Counter(f"item {i}" for i in range(ITEMS)), "each id once"
        assert all(r["status"] == "completed" for r in records)
        assert not any("-" in r["run"] for r in records), "one run per item, its first attempt"
        asked = Counter(item_of(r) for r in server.requests)
        assert set(asked) == {f"item {i}" for i in range(ITEMS)}
        again = {i: n for i, n in asked.items() if n > 1}
        assert len(again) <= 16 and set(again.values()) <= {2}, again  # only the calls in flight at the kill
        # the rest of the batch takes a few seconds; anything the kill held up waits at most about a lease
        assert took < RECOVERY_LIMIT, f"the batch ended {took:.0f}s after the kill\n{cluster.worker_log()}"
