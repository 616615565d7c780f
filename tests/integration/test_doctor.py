"""``shelly doctor`` against real servers: the shared Redis and RabbitMQ, real ``shelly worker``
processes, and redis-servers of our own for a password, eviction policies and persistence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from .cluster import Cluster, scripted
from .own_redis import REFUSED_PORT, own_redis

pytestmark = pytest.mark.integration

TEAM = ([scripted(solo=["hi"])], [{"name": "solo"}])


def doctor(cluster: Cluster, *args: str) -> tuple[int, dict[str, Any]]:
    """``shelly doctor --json``: the exit code and the parsed report."""
    out = cluster.shelly("doctor", "--json", *args)
    assert out.stdout, out.stderr
    return out.returncode, json.loads(out.stdout)


def lines(report: dict[str, Any], name: str) -> list[dict[str, str]]:
    return [c for c in report["checks"] if c["name"] == name]


def embedded(cluster: Cluster, redis_url: str | None = None) -> None:
    """A config with no broker; ``redis_url`` set only when given."""
    config: dict[str, Any] = {"providers": TEAM[0], "agents": TEAM[1]}
    if redis_url:
        config["distributed"] = {"redis_url": redis_url}
    (cluster.root / ".shelly" / "config.yaml").write_text(yaml.safe_dump(config))


# -- the pool --------------------------------------------------------------------------------


def test_a_worker_on_the_queue_with_the_same_config_passes(cluster: Cluster) -> None:
    cluster.write_config(*TEAM)
    worker = cluster.start_worker("w1", concurrency=3)
    code, report = doctor(cluster)
    assert code == 0, report
    [line] = lines(report, "worker")
    assert line["status"] == "ok" and worker in line["detail"] and "concurrency 3" in line["detail"]
    assert "same config" in line["detail"]


def test_no_worker_on_the_queue_fails(cluster: Cluster) -> None:
    cluster.write_config(*TEAM)
    code, report = doctor(cluster)
    assert code == 1
    [line] = lines(report, "workers")
    assert line["status"] == "fail" and f"no worker listens on queue {cluster.queue!r}" in line["detail"]
    assert "shelly worker" in line["fix"]


def test_a_worker_with_another_config_fails_naming_both_fingerprints(cluster: Cluster) -> None:
    cluster.write_config(*TEAM)
    worker = cluster.start_worker("w1")
    cluster.write_config(TEAM[0], [{"name": "solo", "description": "changed since the worker started"}])
    code, report = doctor(cluster)
    assert code == 1
    [line] = lines(report, "worker")
    assert line["status"] == "fail" and worker in line["detail"] and "differs from this config's" in line["detail"]


def test_text_output_is_one_line_per_check_with_the_fix(cluster: Cluster) -> None:
    cluster.write_config(*TEAM)
    out = cluster.shelly("doctor")
    assert out.returncode == 1
    assert out.stdout.splitlines()[0].startswith("ok    config: ")
    assert f"fail  workers: no worker listens on queue {cluster.queue!r}" in out.stdout
    assert "      → start one with this config" in out.stdout


def test_rabbitmq_broker_with_a_worker_passes(cluster: Cluster) -> None:
    cluster.write_config(*TEAM, distributed={"broker_url": "amqp://guest:guest@127.0.0.1:5672//"})
    cluster.broker_url = "amqp://guest:guest@127.0.0.1:5672//"
    cluster.start_worker("w1")
    code, report = doctor(cluster)
    assert code == 0, report
    assert lines(report, "broker")[0]["status"] == "ok"


def test_rabbitmq_with_a_wrong_password_fails_the_broker_without_printing_it(cluster: Cluster) -> None:
    cluster.write_config(*TEAM, distributed={"broker_url": "amqp://guest:wrong-pw@127.0.0.1:5672//"})
    code, report = doctor(cluster)
    assert code == 1
    [line] = lines(report, "broker")
    assert line["status"] == "fail" and "refused the credentials" in line["detail"]
    assert "wrong-pw" not in json.dumps(report)


# -- Redis -----------------------------------------------------------------------------------


def test_refused_redis_fails_and_skips_nothing_silently(cluster: Cluster) -> None:
    url = f"redis://127.0.0.1:{REFUSED_PORT}/0"
    cluster.write_config(*TEAM, distributed={"redis_url": url, "broker_url": url})
    code, report = doctor(cluster)
    assert code == 1
    assert lines(report, "redis")[0]["status"] == "fail" and "cannot connect" in lines(report, "redis")[0]["detail"]
    assert lines(report, "workers")[0]["status"] == "fail"


@pytest.mark.parametrize("password", ["", "bad-pw"], ids=["no-password", "wrong-password"])
def test_redis_with_requirepass_fails_on_missing_or_wrong_credentials(
    cluster: Cluster, tmp_path: Path, password: str
) -> None:
    with own_redis(tmp_path, "--requirepass", "right-pw") as port:
        embedded(cluster, f"redis://:{password}@127.0.0.1:{port}/0" if password else f"redis://127.0.0.1:{port}/0")
        code, report = doctor(cluster)
    assert code == 1
    [line] = lines(report, "redis")
    assert line["status"] == "fail" and "refused the credentials" in line["detail"]
    assert "bad-pw" not in json.dumps(report)


def test_redis_with_the_right_password_passes(cluster: Cluster, tmp_path: Path) -> None:
    with own_redis(tmp_path, "--requirepass", "right-pw", "--appendonly", "yes") as port:
        embedded(cluster, f"redis://:right-pw@127.0.0.1:{port}/0")
        code, report = doctor(cluster)
    assert code == 0, report
    assert [c["status"] for c in report["checks"] if c["name"].startswith("redis")] == ["ok", "ok", "ok"]
    assert "right-pw" not in json.dumps(report)


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-ttl"])
def test_an_evicting_maxmemory_policy_warns_but_passes(cluster: Cluster, tmp_path: Path, policy: str) -> None:
    with own_redis(tmp_path, "--maxmemory-policy", policy) as port:
        embedded(cluster, f"redis://127.0.0.1:{port}/0")
        code, report = doctor(cluster)
    assert code == 0
    [line] = lines(report, "redis eviction")
    assert line["status"] == "warn" and policy in line["detail"] and "noeviction" in line["fix"]


def test_no_persistence_warns(cluster: Cluster, tmp_path: Path) -> None:
    with own_redis(tmp_path) as port:  # --save "" --appendonly no
        embedded(cluster, f"redis://127.0.0.1:{port}/0")
        code, report = doctor(cluster)
    assert code == 0
    [line] = lines(report, "redis persistence")
    assert line["status"] == "warn" and "appendonly yes" in line["fix"]


@pytest.mark.parametrize("args", [("--appendonly", "yes"), ("--save", "900 1")], ids=["aof", "rdb"])
def test_aof_or_rdb_counts_as_persistence(cluster: Cluster, tmp_path: Path, args: tuple[str, str]) -> None:
    with own_redis(tmp_path, *args) as port:
        embedded(cluster, f"redis://127.0.0.1:{port}/0")
        _, report = doctor(cluster)
    assert lines(report, "redis persistence")[0]["status"] == "ok"


# -- config ----------------------------------------------------------------------------------


def test_embedded_config_checks_only_the_config(cluster: Cluster) -> None:
    embedded(cluster)
    code, report = doctor(cluster)
    assert code == 0
    assert [c["name"] for c in report["checks"]] == ["config", "broker"]
    assert "embedded" in report["checks"][1]["detail"]


def test_an_invalid_config_fails_with_exit_2_naming_the_field(cluster: Cluster) -> None:
    (cluster.root / ".shelly" / "config.yaml").write_text(
        "providers: [{name: p, kind: scripted, script: {}}]\nagents: [{name: solo, options: {max_iterations: -1}}]\n")
    code, report = doctor(cluster)
    assert code == 2
    assert report["checks"][0]["status"] == "fail"
    assert "agents[0].options.max_iterations" in report["checks"][0]["detail"]
