"""A read-only ``.shelly`` is a supported deployment (DESIGN §3 rule 13), tested as a user deploys
it: every process runs inside its own mount namespace where ``.shelly`` is a read-only bind mount
(``unshare -m``, as compose ``:ro``, a ConfigMap or ``ProtectSystem=strict`` would make it).

The worker, the coordinator on the pool, Flower and ``shelly batch`` must work, saved sessions go
to Redis when distributed, and an embedded run falls back to the user's state directory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port

from .cluster import Cluster, wait_until
from .ops import FLOWER_AUTH, SHELLY, Processes, delegating_team, http_get, run_json, wait_for_http

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def read_only(directory: Path) -> list[str]:
    """argv prefix running a command with ``directory`` bind-mounted read-only (own namespace)."""
    return ["unshare", "-m", "--propagation", "private", "sh", "-c",
            'mount --bind -o ro "$0" "$0" && exec "$@"', str(directory)]


def snapshot(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


@pytest.fixture
def ro_cluster(cluster: Cluster) -> Iterator[Cluster]:
    """The cluster's team config, then every shelly process run on a read-only ``.shelly``."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.fail("read-only mount tests need unshare and root (see /work/shared/CONTAINERS.md)")
    delegating_team(cluster)
    cluster.wrapper = read_only(cluster.root / ".shelly")
    before = snapshot(cluster.root / ".shelly")
    yield cluster
    assert snapshot(cluster.root / ".shelly") == before


def test_worker_and_coordinator_run_a_delegation_on_a_read_only_config(ro_cluster: Cluster) -> None:
    ro_cluster.start_worker("w1")
    result = run_json(ro_cluster)
    assert result["reply"] == "lead done"


def test_a_pool_session_is_saved_in_redis_on_a_read_only_config(ro_cluster: Cluster) -> None:
    ro_cluster.start_worker("w1")
    first = run_json(ro_cluster)
    saved = ro_cluster.redis.hget(f"{ro_cluster.prefix}s:{first['session']}:saved", "meta")
    assert saved and json.loads(saved)["agent"] == "lead"


def test_batch_runs_on_a_read_only_config(ro_cluster: Cluster) -> None:
    ro_cluster.start_worker("w1")
    (ro_cluster.root / "in.jsonl").write_text('{"id": "a", "task": "go"}\n')
    out = ro_cluster.shelly("batch", "--tasks", "in.jsonl", "--output", "out.jsonl", "--quiet")
    assert out.returncode == 0, f"{out.stderr}\n{ro_cluster.worker_log()}"
    (line,) = (json.loads(x) for x in (ro_cluster.root / "out.jsonl").read_text().splitlines())
    assert (line["id"], line["status"], line["reply"]) == ("a", "completed", "lead done")


def test_flower_serves_its_api_on_a_read_only_config(ro_cluster: Cluster, procs: Processes) -> None:
    hostname = ro_cluster.start_worker("w1")
    port = free_port()
    proc = procs.start("flower", [*ro_cluster.wrapper, *SHELLY, "flower", "--port", str(port), "--basic-auth",
                                  FLOWER_AUTH])
    url = f"http://127.0.0.1:{port}"
    wait_for_http(f"{url}/healthcheck", proc, f"flower\n{procs.log('flower')}")

    def listed() -> bool:
        status, workers = http_get(f"{url}/api/workers?refresh=1", FLOWER_AUTH)
        assert status == 200, status
        return hostname in (workers or {})

    wait_until(listed, 60, f"{hostname} in /api/workers")


def test_embedded_run_saves_to_the_user_state_dir_and_continues_from_it(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / ".shelly").mkdir(parents=True)
    (project / ".shelly" / "config.yaml").write_text(
        'providers: [{name: p, kind: scripted, model: m, script: {"*": ["hello back", "again back"]}}]\n'
        "agents: [{name: solo}]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHELLY_")}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")

    def run(*args: str) -> dict[str, str]:
        out = subprocess.run([*read_only(project / ".shelly"), *SHELLY, "run", "--json", *args], cwd=project,
                             env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    first = run("hi")
    assert list((tmp_path / "state" / "shelly").glob(f"proj-*/sessions/{first['session']}/meta.json"))
    assert run("--session", first["session"], "again")["session"] == first["session"]
    assert snapshot(project / ".shelly") == ["config.yaml"]


def test_embedded_run_with_no_writable_state_dir_fails_before_the_run_naming_shelly_state_dir(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / ".shelly").mkdir(parents=True)
    (project / ".shelly" / "config.yaml").write_text(
        'providers: [{name: p, kind: scripted, model: m, script: {"*": ["hello back"]}}]\nagents: [{name: solo}]\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELLY_", "XDG_"))}
    env["HOME"] = "/proc/no-home"  # as for a user whose home does not exist (nobody: /nonexistent)
    out = subprocess.run([*read_only(project / ".shelly"), *SHELLY, "run", "hi"], cwd=project, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "solo started" not in out.stderr  # it failed before spending anything on the run
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("shelly:")]
    assert line.startswith("shelly: sessions: cannot save session ") and "/proc/no-home/.local/state/shelly/" in line
    assert line.endswith("(set SHELLY_STATE_DIR to a writable directory)")
