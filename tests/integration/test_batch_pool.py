"""``shelly batch`` on a worker pool, interrupted: Ctrl-C cancels what it submitted, and a rerun
continues the runs of the interrupted batch instead of submitting them again."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from shelly_dist.testing.model_server import ModelServer, Reply

from .cluster import Cluster, wait_until
from .keys import assert_all_keys_have_ttl

pytestmark = pytest.mark.integration


def model_team(cluster: Cluster, server: ModelServer, distributed: dict[str, Any] | None = None) -> Path:
    """One ``solver`` agent on the loopback model; ``distributed`` overrides the cluster's timing."""
    return cluster.write_config(
        [{"name": "mock", "kind": "openai", "model": "gpt-test", "base_url": server.url, "api_key": "k",
          "rate_limit": {"max_retries": 0}}],
        [{"name": "solver", "provider": "mock"}], distributed=distributed,
    )


def write_items(cluster: Cluster, n: int) -> None:
    lines = [json.dumps({"id": f"item {i}", "task": f"question {i}"}) for i in range(n)]
    (cluster.root / "in.jsonl").write_text("\n".join(lines) + "\n")


BATCH = ("batch", "--tasks", "in.jsonl", "--output", "out.jsonl", "--quiet")


def roots(cluster: Cluster) -> list[dict[str, Any]]:
    """Every root run record of the cluster."""
    out = []
    for key in cluster.redis.scan_iter(match=cluster.prefix + "run:*", count=1000):
        if key.count(":") == cluster.prefix.count(":") + 1:
            record = cluster.redis.hgetall(key)
            if record.get("depth") == "0":
                out.append(record)
    return out


def output_lines(cluster: Cluster) -> list[dict[str, Any]]:
    path = cluster.root / "out.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def interrupted_batch(cluster: Cluster, server: ModelServer, in_flight: int, sig: int, *args: str) -> tuple[int, str]:
    """Start ``shelly batch``, send it ``sig`` once ``in_flight`` model requests have arrived, and
    return its exit code and stderr (the process is always reaped)."""
    batch = cluster.popen(*BATCH, *args)
    try:
        server.wait_for_requests(in_flight, timeout=60)
        batch.send_signal(sig)
        _, stderr = batch.communicate(timeout=60)
    finally:
        if batch.poll() is None:
            batch.kill()
            batch.wait()
    return batch.returncode, stderr


def test_ctrl_c_on_a_pool_batch_cancels_every_submitted_run_and_exits_130(cluster: Cluster):
    with ModelServer(format="openai", default=Reply(text="never in time", delay=60)) as server:
        model_team(cluster, server)
        write_items(cluster, 6)
        cluster.start_worker("w1")
        # four items in flight, two never submitted
        code, stderr = interrupted_batch(cluster, server, 4, signal.SIGINT, "--concurrency", "4")
        assert code == 130, stderr
        assert "Traceback" not in stderr
        submitted = roots(cluster)
        assert len(submitted) == 4
        assert all(r.get("canceled") == "1" for r in submitted)
        wait_until(lambda: all(r["status"] == "canceled" for r in roots(cluster)), 60,
                   f"every submitted run canceled\n{cluster.worker_log()}")
        assert len(server.requests) == 4, "no model request after the cancel"
        assert output_lines(cluster) == []
        assert_all_keys_have_ttl(cluster.redis, cluster.prefix)


def test_sigterm_on_a_pool_batch_cancels_every_submitted_run_and_exits_143(cluster: Cluster):
    with ModelServer(format="openai", default=Reply(text="never in time", delay=60)) as server:
        model_team(cluster, server)
        write_items(cluster, 2)
        cluster.start_worker("w1")
        code, stderr = interrupted_batch(cluster, server, 2, signal.SIGTERM)
        assert code == 143, stderr
        assert "shelly: terminated" in stderr and "Traceback" not in stderr
        wait_until(lambda: all(r["status"] == "canceled" for r in roots(cluster)), 60, "the runs canceled")
        assert output_lines(cluster) == []


def test_rerun_after_a_killed_batch_continues_its_runs_without_submitting_them_again(cluster: Cluster):
    with ModelServer(format="openai", default=Reply(text="the answer", delay=3)) as server:
        model_team(cluster, server)
        write_items(cluster, 4)
        cluster.start_worker("w1")
        # SIGKILL: no chance to cancel anything, the runs go on without it
        interrupted_batch(cluster, server, 4, signal.SIGKILL, "--concurrency", "4")
        again = cluster.shelly(*BATCH, timeout=120)
        assert again.returncode == 0, f"{again.stderr}\n{cluster.worker_log()}"
        lines = output_lines(cluster)
        assert sorted(r["id"] for r in lines) == [f"item {i}" for i in range(4)]
        assert {r["reply"] for r in lines} == {"the answer"}
        assert len(roots(cluster)) == 4, "one run per item"
        assert len(server.requests) == 4, "each item asked the model once"
        assert_all_keys_have_ttl(cluster.redis, cluster.prefix)


def test_rerun_after_ctrl_c_runs_the_canceled_items_again_as_a_new_attempt(cluster: Cluster):
    with ModelServer(format="openai", default=Reply(text="slow answer", delay=60)) as server:
        model_team(cluster, server)
        write_items(cluster, 2)
        cluster.start_worker("w1")
        interrupted_batch(cluster, server, 2, signal.SIGINT)
        wait_until(lambda: all(r["status"] == "canceled" for r in roots(cluster)), 60, "the runs canceled")
        server.default = Reply(text="quick answer")
        again = cluster.shelly(*BATCH, timeout=120)
        assert again.returncode == 0, f"{again.stderr}\n{cluster.worker_log()}"
        lines = output_lines(cluster)
        assert sorted(r["id"] for r in lines) == ["item 0", "item 1"]
        assert {r["reply"] for r in lines} == {"quick answer"}
        assert all(r["run"].endswith("-2") for r in lines), "the second attempt of each item"


def test_ctrl_c_on_an_embedded_batch_exits_130_without_writing_unfinished_items(cluster: Cluster):
    with ModelServer(format="openai", default=Reply(text="never in time", delay=60)) as server:
        model_team(cluster, server)
        config = cluster.root / ".shelly" / "config.yaml"
        text = config.read_text()
        config.write_text(text[: text.index("distributed:")])  # no broker: items run in this process
        write_items(cluster, 3)
        code, stderr = interrupted_batch(cluster, server, 3, signal.SIGINT)
        assert code == 130, stderr
        assert "interrupted" in stderr and "Traceback" not in stderr
        assert output_lines(cluster) == []
