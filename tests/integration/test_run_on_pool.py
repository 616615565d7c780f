"""``shelly run`` as a coordinator on the pool, as a user runs it: it exits as soon as the run is
over, and its live view shows every remote child (issue 12 failure 1, issue 13 item 4)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from typing import Any

import pytest
import yaml

from .cluster import DEFAULT_TIMING, Cluster, complete, delegate, scripted

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
    cluster.write_config([scripted(solo=["hello {task}"])], [{"name": "solo"}], distributed=DEFAULT_TIMING)
    cluster.start_worker("w1")
    for i in range(8):
        assert run(cluster, f"try {i}").stdout.strip() == f"hello try {i}"


def demo_on_the_pool(cluster: Cluster) -> str:
    """The demo team of `shelly init`, pointed at this cluster; returns the worker's hostname."""
    assert cluster.shelly("init", "--template", "demo").returncode == 0
    demo = yaml.safe_load((cluster.root / ".shelly" / "config.yaml").read_text())
    demo.pop("distributed", None)
    cluster.write_config(demo.pop("providers"), demo.pop("agents"), distributed=DEFAULT_TIMING, **demo)
    return cluster.start_worker("w1")


def run_on_a_terminal(cluster: Cluster, task: str) -> str:
    """`shelly run` with stderr on a pseudo-terminal (the rich live view); returns what it drew."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "shelly_dist.cli.main", "run", task], cwd=cluster.root,
                            stderr=slave, stdout=subprocess.DEVNULL, env={**cluster.env(), "COLUMNS": "160"})
    os.close(slave)
    drawn = b""
    deadline = time.monotonic() + RUN_DEADLINE
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the terminal closed: the process has exited
                    break
                if not chunk:
                    break
                drawn += chunk
            elif proc.poll() is not None:
                break
        assert proc.wait(10) == 0, drawn.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        os.close(master)
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", drawn.decode(errors="replace"))


def test_the_demo_team_on_the_pool_shows_each_agent_with_its_worker_status_and_tokens(cluster: Cluster) -> None:
    host = demo_on_the_pool(cluster)
    for _ in range(5):
        err = run(cluster, "Why is the sky blue?").stderr  # piped: the plain view
        assert re.search(r"^✔ orchestrator finished \([1-9]\d* tokens\)$", err, re.M), err
        for child in ("researcher", "writer"):
            line = rf"^  ✔ {child}-\S+ done on {re.escape(host)} \([1-9]\d* tokens\)$"
            assert re.search(line, err, re.M), f"no finished {child} line with worker and tokens:\n{err}"


def test_the_live_table_on_a_terminal_ends_with_every_remote_child_done(cluster: Cluster) -> None:
    host = demo_on_the_pool(cluster)
    for _ in range(3):
        drawn = run_on_a_terminal(cluster, "Why is the sky blue?")
        final = drawn[drawn.rindex("agent "):]  # the last redraw of the table
        assert re.search(r"^orchestrator\s+0\s+-\s+done\s.*\s[1-9]\d*\s*$", final, re.M), final
        for child in ("researcher", "writer"):
            row = rf"^\s+{child}-\S+\s+1\s+{re.escape(host)}\s+done\s.*\s[1-9]\d*\s*$"
            assert re.search(row, final, re.M), f"no finished {child} row with worker and tokens:\n{final}"


def lead_delegating_then_listing(child_script: list[Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A lead that delegates to ``helper``, then calls ``list_agents``, then answers."""
    lead = [delegate(("helper", "fix the parser")), {"tool_calls": [{"name": "list_agents", "arguments": {}}]},
            "all done"]
    return [scripted(lead=lead, helper=child_script)], [
        {"name": "lead", "options": {"max_delegation_depth": 1}}, {"name": "helper"}]


def test_the_plain_view_on_the_pool_shows_a_childs_end_before_its_parents_next_step(cluster: Cluster) -> None:
    providers, agents = lead_delegating_then_listing([complete("fixed")])
    cluster.write_config(providers, agents, distributed=DEFAULT_TIMING, entry_agent="lead")
    cluster.start_worker("w1")
    for _ in range(3):
        lines = run(cluster, "go").stderr.splitlines()
        child_done = next(i for i, line in enumerate(lines) if re.match(r"^  ✔ helper-\S+ done on ", line))
        next_step = next(i for i, line in enumerate(lines) if "lead → list_agents" in line)
        assert child_done < next_step, "\n".join(lines)


def test_a_failed_child_on_the_pool_is_shown_with_its_reason_and_the_run_is_not_shown_as_a_success(
    cluster: Cluster,
) -> None:
    providers, agents = lead_delegating_then_listing([{"error": "simulated outage"}])
    cluster.write_config(providers, agents, distributed=DEFAULT_TIMING, entry_agent="lead")
    cluster.start_worker("w1")
    err = run(cluster, "go").stderr
    assert re.search(r"^  ✗ helper-\S+ failed on \S+: .*simulated outage.* \(0 tokens\)$", err, re.M), err
    assert re.search(r"^! lead finished \(\d+ tokens\); 1 child failed: helper-\S+ \(.*simulated outage", err,
                     re.M), err
    assert not re.search(r"^✔ lead finished", err, re.M), err


def test_run_json_on_the_pool_totals_the_usage_of_the_whole_tree(cluster: Cluster) -> None:
    demo_on_the_pool(cluster)
    out = cluster.shelly("run", "--json", "--quiet", "Why is the sky blue?", timeout=RUN_DEADLINE)
    assert out.returncode == 0, f"stderr:\n{out.stderr}\n{cluster.worker_log()}"
    data = json.loads(out.stdout)
    own, tree = data["usage"], data["tree_usage"]
    assert tree["model_requests"] > own["model_requests"] > 0  # the children's calls come in
    assert tree["output_tokens"] > own["output_tokens"]
