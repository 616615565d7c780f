"""``shelly run`` as a coordinator on the pool, as a user runs it: it exits as soon as the run is
over, and its live view shows every remote child (issue 12 failure 1, issue 13 item 4)."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from .cluster import Cluster, scripted

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

RUN_DEADLINE = 60.0
"""Seconds one `shelly run` may take here; the run itself takes well under one."""


def run(cluster: Cluster, task: str) -> subprocess.CompletedProcess[str]:
    try:
        out = cluster.shelly("run", task, timeout=RUN_DEADLINE)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"`shelly run` still running after {RUN_DEADLINE}s; stderr:\n{exc.stderr}") from exc
    assert out.returncode == 0, f"stderr:\n{out.stderr}\n{cluster.worker_log()}"
    return out


def test_a_one_agent_run_on_the_pool_exits_after_its_answer_every_time(cluster: Cluster) -> None:
    cluster.write_config([scripted(solo=["hello {task}"])], [{"name": "solo"}])
    cluster.start_worker("w1")
    for i in range(8):
        assert run(cluster, f"try {i}").stdout.strip() == f"hello try {i}"


def test_the_demo_team_on_the_pool_shows_each_agent_with_its_worker_status_and_tokens(cluster: Cluster) -> None:
    assert cluster.shelly("init", "--template", "demo").returncode == 0
    demo = yaml.safe_load((cluster.root / ".shelly" / "config.yaml").read_text())
    demo.pop("distributed", None)
    cluster.write_config(demo.pop("providers"), demo.pop("agents"), **demo)
    host = cluster.start_worker("w1")
    for _ in range(5):
        err = run(cluster, "Why is the sky blue?").stderr  # piped: the plain view
        assert re.search(r"^✔ orchestrator finished \([1-9]\d* tokens\)$", err, re.M), err
        for child in ("researcher", "writer"):
            line = rf"^  ✔ {child}-\S+ done on {re.escape(host)} \([1-9]\d* tokens\)$"
            assert re.search(line, err, re.M), f"no finished {child} line with worker and tokens:\n{err}"
