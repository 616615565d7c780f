"""Python extensions on the pool (issue 21): the config fingerprint covers the modules' source, so a
worker still running the old tools never advances a run of the new ones (DESIGN §3 generations)."""

from __future__ import annotations

import json

import pytest

from ..spec.test_extensions import Project, team
from .cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_a_worker_with_the_old_source_of_a_tool_does_not_run_the_new_generations_children(cluster: Cluster) -> None:
    project = Project(cluster, "pool")
    team(project)  # starts the worker, which imports team/tools.py as it is now
    tools = cluster.root / "team" / "tools.py"
    tools.write_text(tools.read_text().replace(": shipped", ": delivered"))
    out = cluster.shelly("run", "order A1", "--json")
    assert out.returncode == 0, out.stderr
    events = cluster.events(json.loads(out.stdout)["session"])
    finished = next(e for e in events if e["kind"] == "run_finished" and e["data"].get("entry"))
    assert "config fingerprint mismatch" in finished["data"]["entry"]["error"]
    assert not (cluster.root / "tool-pids.txt").exists()
