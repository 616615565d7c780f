"""The provider governor on a pool (issue 33's "done when"): real ``shelly worker`` processes, the
real Redis, and the strict stand-in vendor (sliding-window limits, 429 + ``retry-after``).

- three workers sharing a key of ``rpm: 40`` run 80 batch items with at most 2 rejections, in the
  time the limit allows;
- a vendor answering 429 ``retry-after: 15`` to everything for 15 s gets nothing from any worker in
  that window once the pool has heard it (within a second), and every item completes;
- an interactive ``shelly run`` is answered promptly while a batch saturates the key.
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest

from shelly_dist.testing.model_server import ModelServer, Reply
from shelly_dist.testing.strict_limits import StrictLimits

from .cluster import Cluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]


def team(cluster: Cluster, server: ModelServer, rate_limit: dict[str, Any] | None = None) -> None:
    cluster.write_config(
        [{"name": "mock", "kind": "openai", "model": "gpt-test", "base_url": server.url, "api_key": "k",
          **({"rate_limit": rate_limit} if rate_limit else {})}],
        [{"name": "solver", "provider": "mock"}],
    )


def write_items(cluster: Cluster, n: int) -> None:
    lines = [json.dumps({"id": f"item {i}", "task": f"question {i}"}) for i in range(n)]
    (cluster.root / "in.jsonl").write_text("\n".join(lines) + "\n")


def output_lines(cluster: Cluster) -> list[dict[str, Any]]:
    path = cluster.root / "out.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_batch(cluster: Cluster, n: int, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    write_items(cluster, n)
    return cluster.shelly("batch", "--tasks", "in.jsonl", "--output", "out.jsonl", "--quiet",
                          "--concurrency", str(n), *args, timeout=timeout)


@pytest.mark.slow
def test_three_workers_share_one_keys_rpm_and_the_vendor_refuses_at_most_two(cluster: Cluster) -> None:
    limits = StrictLimits(rpm=40)
    with ModelServer(format="openai", limits=limits, latency=0.2) as server:
        team(cluster, server, {"rpm": 40})
        cluster.start_workers("w1", "w2", "w3")
        started = time.monotonic()
        out = run_batch(cluster, 80)
        elapsed = time.monotonic() - started
    assert out.returncode == 0, f"{out.stderr}\n{cluster.worker_log()}"
    lines = output_lines(cluster)
    assert len(lines) == 80 and all(line["status"] == "completed" for line in lines)
    assert len(limits.rejected) <= 2, f"{len(limits.rejected)} requests refused"
    assert limits.max_in_any_window() <= 40
    # 80 requests at 40 a minute: two minutes of the key's budget, paced (one per 61/40 s), with no
    # time lost to backoff (before the governor, two workers earned a 429 on a third of their
    # requests). The span is the vendor's own clock, so a slow start of the processes is not in it.
    span = max(limits.accepted) - min(limits.accepted)
    assert span <= 79 * 61 / 40 + 15, f"{span:.0f}s from the first request to the last"
    assert elapsed < 300, f"{elapsed:.0f}s"


def test_a_429_for_everything_is_heard_by_every_worker_and_waited_out(cluster: Cluster) -> None:
    limits = StrictLimits()
    with ModelServer(format="openai", limits=limits) as server:
        team(cluster, server)
        cluster.start_workers("w1", "w2", "w3")
        limits.reject_all(15)  # from now: 429, retry-after 15, to everything, for 15 s
        out = run_batch(cluster, 12)
    assert out.returncode == 0, f"{out.stderr}\n{cluster.worker_log()}"
    lines = output_lines(cluster)
    assert len(lines) == 12 and all(line["status"] == "completed" for line in lines)
    heard = min(limits.rejected) + 1.0  # the pool has heard it within a second of the first refusal
    spell_end = heard - 1.0 + 15.0
    during = [a for a in limits.rejected + limits.accepted if heard < a < spell_end - 0.05]
    assert during == [], f"{len(during)} requests sent into the announced pause"
    assert len(limits.accepted) == 12


def test_an_interactive_run_is_answered_promptly_while_a_batch_saturates_the_key(cluster: Cluster) -> None:
    limits = StrictLimits(rpm=30)
    with ModelServer(format="openai", limits=limits, default=Reply(text="batch answer")) as server:
        team(cluster, server, {"rpm": 30})
        cluster.start_workers("w1", "w2")
        write_items(cluster, 60)
        batch = cluster.popen("batch", "--tasks", "in.jsonl", "--output", "out.jsonl", "--quiet",
                              "--concurrency", "60")
        try:
            # The key is saturated: batch requests paced at one per 2 s, a backlog of minutes.
            wait_until(lambda: len(limits.accepted) >= 8, 120, f"the batch under way\n{cluster.worker_log()}")
            started = time.monotonic()
            run = cluster.shelly("run", "a person asks", "--agent", "solver", "--json", "--quiet", timeout=120)
            elapsed = time.monotonic() - started
            done_by_then = len(output_lines(cluster))
        finally:
            batch.kill()
            batch.wait()
    assert run.returncode == 0, f"{run.stderr}\n{cluster.worker_log()}"
    assert json.loads(run.stdout)["reply"] == "batch answer"
    assert done_by_then < 40, "the batch's backlog was not ahead of the run"
    # One pacing interval (2 s) plus the process's start and the model's latency; behind the batch's
    # backlog it would have waited more than a minute.
    assert elapsed < 20, f"{elapsed:.1f}s"
    assert limits.rejected == []


def test_a_keys_spend_limit_holds_across_the_pool_and_names_itself(cluster: Cluster) -> None:
    with ModelServer(format="openai", default=Reply(text="priced", usage={"input": 0, "output": 1})) as server:
        cluster.write_config(
            [{"name": "mock", "kind": "openai", "model": "gpt-test", "base_url": server.url, "api_key": "k",
              "max_tokens": 2, "spend": {"day_usd": 5.5}}],
            [{"name": "solver", "provider": "mock"}],
            pricing=[{"provider": "openai", "prefix": "gpt-test", "input": 0.0, "output": 1_000_000.0}],
        )
        cluster.start_workers("w1", "w2")
        out = run_batch(cluster, 12, timeout=180)
        lines = output_lines(cluster)
    assert len(lines) == 12, f"{out.stderr}\n{cluster.worker_log()}"
    done = [line for line in lines if line["status"] == "completed"]
    refused = [line for line in lines if line["status"] != "completed"]
    # Each call reserves its most ($2: two output tokens at $1) and costs $1: the pool never passes $5.50.
    assert 2 <= len(done) <= 5 and sum(line["usage"]["cost_usd"] for line in done) <= 5.5
    assert len(server.requests) == len(done)
    assert all('spend limit: provider "mock" key 1 reached its day_usd 5.50' in line["error"] for line in refused)


def test_runs_waiting_for_their_keys_budget_hold_no_worker_slot(cluster: Cluster) -> None:
    limits = StrictLimits(rpm=1)
    with ModelServer(format="openai", limits=limits) as server:
        team(cluster, server, {"rpm": 1})
        cluster.start_worker("w1", concurrency=2)
        write_items(cluster, 8)
        batch = cluster.popen("batch", "--tasks", "in.jsonl", "--output", "out.jsonl", "--quiet", "--concurrency", "8")
        try:
            # One request a minute: the first item goes; the other seven wait for the key, and only
            # because none holds one of the worker's two slots can all seven wait at once.
            def waiting() -> list[dict[str, str]] | None:
                assert batch.poll() is None, batch.communicate()
                runs = [cluster.redis.hgetall(k) for k in cluster.redis.scan_iter(match=cluster.prefix + "run:*")
                        if k.count(":") == cluster.prefix.count(":") + 1]
                found = [r for r in runs if r.get("status") == "waiting"]
                return found if len(found) == 7 else None

            found = wait_until(waiting, 90, f"seven runs waiting for the key\n{cluster.worker_log()}")
        finally:
            batch.kill()
            batch.wait()
    # rpm, or paused: the first answer said no request remains until its minute is over
    assert {r["waiting_for"] for r in found} <= {"the mock key: rpm", "the mock key: queue", "the mock key: paused"}
    assert len(server.requests) == 1 and limits.rejected == []
