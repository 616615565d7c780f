"""Provider batches on a worker pool: model calls go to the vendors' batch APIs (the strict stand-in),
their runs wait holding no worker slot, and every reply comes back once, at the batch price."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from shelly_dist.testing.model_server import ModelServer, Reply

from .cluster import Cluster, wait_until
from .keys import assert_all_keys_have_ttl
from .support.redis_server import RedisServer
from .test_batch_pool import output_lines, roots

pytestmark = pytest.mark.integration

USAGE = {"input": 1000, "output": 100}
DIRECT_COST = (1000 * 2.5 + 100 * 10.0) / 1e6
"""gpt-4o at the default table's price: what one call costs interactively."""


def batch_team(cluster: Cluster, server: ModelServer, kind: str = "openai", **batch: Any) -> None:
    model = "gpt-4o" if kind == "openai" else "claude-sonnet-4-5"
    settings = {"enabled": True, "collect_window": "1s", "poll_interval": "0.5s", **batch}
    if kind == "openai":
        settings.setdefault("api", "openai")
    cluster.write_config(
        [{"name": "vendor", "kind": kind, "model": model, "base_url": server.url, "api_key": "k",
          "rate_limit": {"max_retries": 0}, "batch": settings}],
        [{"name": "solver", "provider": "vendor"}],
    )


def items(cluster: Cluster, n: int) -> None:
    lines = [json.dumps({"id": f"item {i}", "task": f"question {i}"}) for i in range(n)]
    (cluster.root / "in.jsonl").write_text("\n".join(lines) + "\n")


def direct_calls(server: ModelServer) -> list[Any]:
    return [r for r in server.requests if r.path.endswith(("/chat/completions", "/messages"))]


def run_batch(cluster: Cluster, n: int, *args: str) -> list[dict[str, Any]]:
    items(cluster, n)
    done = cluster.shelly("batch", "--tasks", "in.jsonl", "--output", "out.jsonl", "--quiet",
                          "--concurrency", str(n), *args, timeout=240)
    assert done.returncode == 0, done.stderr + cluster.worker_log()
    return output_lines(cluster)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_sixty_items_on_eight_slots_are_all_answered_from_provider_batches_each_request_sent_once(
        cluster: Cluster, kind: str) -> None:
    with ModelServer(batch_delay=1.0, default=Reply(text="the answer", usage=USAGE)) as server:
        batch_team(cluster, server, kind)
        cluster.start_workers("w1", "w2", concurrency=4)
        lines = run_batch(cluster, 60)
        assert len(lines) == 60 and {line["status"] for line in lines} == {"completed"}
        assert {line["reply"] for line in lines} == {"the answer"}
        assert direct_calls(server) == []
        assert len(server.batches.submitted) == 60 and set(server.batches.submitted.values()) == {1}
        assert max(b["requests"] for b in server.batches.batches()) > 8  # more than the pool's slots
        costs = {round(json.loads(r["usage"])["cost_usd"], 9) for r in roots(cluster)}
        if kind == "openai":
            assert costs == {round(DIRECT_COST / 2, 9)}
        wait_until(lambda: not desk_entries(cluster), 30, "the desk to forget its delivered requests")
        assert_all_keys_have_ttl(cluster.redis, cluster.prefix)


def desk_entries(cluster: Cluster) -> int:
    """Requests the provider desks still keep (window, per-request hashes, flushes)."""
    parts = ("window", "requests", "payloads", "states", "replies", "flushes")
    return sum(cluster.redis.llen(k) if k.endswith(":window") else cluster.redis.hlen(k)
               for k in cluster.redis.scan_iter(match=cluster.prefix + "bk:*") if k.rsplit(":", 1)[-1] in parts)


def test_a_failing_batch_endpoint_falls_back_to_direct_calls_and_every_item_completes(cluster: Cluster) -> None:
    with ModelServer(batch_delay=0.5, default=Reply(text="the answer", usage=USAGE)) as server:
        server.batches.fail("create", 500)
        batch_team(cluster, server)
        cluster.start_workers("w1", "w2", concurrency=4)
        lines = run_batch(cluster, 12)
        assert {line["status"] for line in lines} == {"completed"} and len(lines) == 12
        assert len(direct_calls(server)) == 12 and server.batches.batches() == []
        fallbacks = [e for e in all_events(cluster) if e["kind"] == "batch_fallback"]
        assert len(fallbacks) == 12 and {e["data"]["reason"] for e in fallbacks} == {"submit_error"}
        costs = {round(json.loads(r["usage"])["cost_usd"], 9) for r in roots(cluster)}
        assert costs == {round(DIRECT_COST, 9)}  # a direct call costs the interactive price


def all_events(cluster: Cluster) -> list[dict[str, Any]]:
    """Every event of every session's stream (read from Redis: one `shelly events` per session is slow)."""
    out: list[dict[str, Any]] = []
    for key in cluster.redis.scan_iter(match=cluster.prefix + "s:*:events"):
        for _, entry in cluster.redis.xrange(key):
            out.extend(json.loads(entry["events"]))
    return out


def holder_pid(cluster: Cluster) -> int | None:
    """The pid of the worker holding a batch desk's lock now, if any (its token: host:pid:…)."""
    for key in cluster.redis.scan_iter(match=cluster.prefix + "bk:*:lock"):
        token = cluster.redis.get(key)
        if token:
            return int(token.split(":")[1])
    return None


def worker_of(cluster: Cluster, pid: int) -> str:
    return next(h for h, proc in cluster.workers.items() if proc.pid == pid)


def test_a_holder_killed_while_its_create_is_unanswered_is_re_attached_not_sent_again(cluster: Cluster) -> None:
    with ModelServer(batch_delay=0.5, default=Reply(text="the answer", usage=USAGE)) as server:
        server.batches.stall("create")  # the vendor creates the batch; its id never reaches the holder
        batch_team(cluster, server)
        cluster.start_workers("w1", "w2", concurrency=4)
        items(cluster, 10)
        batch = cluster.popen("batch", "--tasks", "in.jsonl", "--output", "out.jsonl", "--quiet", "--concurrency", "10")
        try:
            server.batches.wait_for_batches(1, timeout=120)
            pid = wait_until(lambda: holder_pid(cluster), 30, "the desk's holder")
            cluster.kill_worker(worker_of(cluster, pid))
            server.batches.unstall("create")
            _, stderr = batch.communicate(timeout=240)
        finally:
            if batch.poll() is None:
                batch.kill()
                batch.wait()
        assert batch.returncode == 0, stderr + cluster.worker_log()
        assert {line["status"] for line in output_lines(cluster)} == {"completed"}
        assert len(server.batches.batches()) == 1 and set(server.batches.submitted.values()) == {1}
        assert direct_calls(server) == []


def test_a_killed_worker_and_a_restarted_redis_while_batches_wait_lose_nothing_and_send_nothing_twice(
        tmp_path: Path) -> None:
    redis_server = RedisServer(tmp_path / "redis-data")  # AOF, appendfsync always: a restart keeps every write
    redis_server.start()
    cluster = Cluster(tmp_path / "project", redis_url=redis_server.url())
    try:
        with ModelServer(batch_delay=0.5, default=Reply(text="the answer", usage=USAGE)) as server:
            server.batches.hold()  # every batch stays in progress until released
            batch_team(cluster, server)
            cluster.start_workers("w1", "w2", concurrency=4)
            items(cluster, 30)
            batch = cluster.popen("batch", "--tasks", "in.jsonl", "--output", "out.jsonl", "--quiet",
                                  "--concurrency", "30")
            try:
                wait_until(lambda: sum(b["requests"] for b in server.batches.batches()) == 30, 120,
                           "every request in a vendor batch")
                created = wait_until(lambda: next((h for h, log in cluster.logs.items()
                                                   if "batch_" in log.read_text() and "created" in log.read_text()),
                                                  None), 30, "the worker that created the batch")
                cluster.kill_worker(created)
                redis_server.kill()
                redis_server.start()
                server.batches.release()
                cluster.start_worker("w3", concurrency=4)
                _, stderr = batch.communicate(timeout=240)
            finally:
                if batch.poll() is None:
                    batch.kill()
                    batch.wait()
            assert batch.returncode == 0, stderr + cluster.worker_log()
            lines = output_lines(cluster)
            assert len(lines) == 30 and {line["status"] for line in lines} == {"completed"}
            assert len(server.batches.submitted) == 30 and set(server.batches.submitted.values()) == {1}
            assert direct_calls(server) == []
    finally:
        cluster.stop()
        redis_server.stop()


def test_provider_batch_sends_a_pool_batchs_calls_through_batches_without_editing_the_provider(
        cluster: Cluster) -> None:
    with ModelServer(batch_delay=0.5, default=Reply(text="the answer", usage=USAGE)) as server:
        batch_team(cluster, server, enabled=False)  # the provider speaks the Batch API but does not use it
        cluster.start_workers("w1", concurrency=4)
        lines = run_batch(cluster, 10, "--provider-batch")
        assert {line["status"] for line in lines} == {"completed"} and len(lines) == 10
        assert direct_calls(server) == [] and sum(b["requests"] for b in server.batches.batches()) == 10


def test_shelly_run_warns_that_it_waits_for_a_provider_batch_and_detach_leaves_the_run_on_the_pool(
        cluster: Cluster) -> None:
    with ModelServer(batch_delay=0.5, default=Reply(text="the answer", usage=USAGE)) as server:
        batch_team(cluster, server, kind="anthropic")
        cluster.start_workers("w1", concurrency=2)
        attached = cluster.shelly("run", "a question")
        assert attached.returncode == 0 and attached.stdout.strip() == "the answer", attached.stderr
        assert "waits for a provider batch (anthropic)" in attached.stderr and "shelly run --detach" in attached.stderr

        detached = cluster.shelly("run", "--detach", "--json", "another question")
        assert detached.returncode == 0, detached.stderr
        started = json.loads(detached.stdout)
        assert "shelly runs --session " + started["session"] in detached.stderr
        key = cluster.prefix + "run:{" + started["run"] + "}"
        wait_until(lambda: cluster.redis.hget(key, "status") == "done", 60, "the detached run to end")
        assert cluster.redis.hget(key, "reply") == "the answer"


def test_shelly_runs_names_the_vendor_batch_and_cancelling_every_run_waiting_on_it_cancels_it(
        cluster: Cluster) -> None:
    with ModelServer(batch_delay=0.5, default=Reply(text="the answer", usage=USAGE)) as server:
        server.batches.hold()
        batch_team(cluster, server)
        cluster.start_workers("w1", concurrency=4)
        items(cluster, 3)
        batch = cluster.popen("batch", "--tasks", "in.jsonl", "--output", "out.jsonl", "--quiet")
        try:
            wait_until(lambda: sum(b["requests"] for b in server.batches.batches()) == 3, 60, "the vendor batch")
            [vendor_batch] = server.batches.batches()
            waiting = f"waiting for openai batch {vendor_batch['id']} (3 requests)"
            session = cluster.session_ids()[0]
            wait_until(lambda: waiting in cluster.shelly("runs", "--session", session).stdout, 30,
                       "`shelly runs` to say which vendor batch the run waits for")
            batch.send_signal(signal.SIGINT)  # Ctrl-C: the batch cancels the tree of every run it waits for
            batch.communicate(timeout=60)
        finally:
            if batch.poll() is None:
                batch.kill()
                batch.wait()
        assert batch.returncode == 130
        wait_until(lambda: server.batches.batches()[0]["canceled"], 30, "the vendor batch's cancel")
        assert direct_calls(server) == []
