"""``shelly sessions`` lists the saved sessions, and ``shelly events`` names a session it does not
know, against the real Redis (issue 25)."""

from __future__ import annotations

import json

import pytest

from .cluster import Cluster, scripted

pytestmark = pytest.mark.integration


def _one_agent(cluster: Cluster) -> None:
    cluster.write_config([scripted(solo=["the answer"])], [{"name": "solo"}])


def test_events_of_an_unknown_session_names_it_and_exits_2(cluster: Cluster):
    _one_agent(cluster)
    out = cluster.shelly("events", "--session", "0123456789abcdef")
    assert out.returncode == 2, out.stderr
    assert "shelly: events: session 0123456789abcdef not found" in out.stderr
    assert "Traceback" not in out.stderr


def test_sessions_lists_a_session_saved_by_a_run_on_the_pool(cluster: Cluster):
    _one_agent(cluster)
    cluster.start_worker("w1")
    run = cluster.shelly("run", "go", "--json")
    assert run.returncode == 0, run.stderr
    session = json.loads(run.stdout)["session"]
    listed = cluster.shelly("sessions", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["id"]: r for r in json.loads(listed.stdout)}
    assert rows[session]["agent"] == "solo" and rows[session]["preview"] == "go"
    text = cluster.shelly("sessions")
    assert any(line.startswith(session) and "solo" in line for line in text.stdout.splitlines()), text.stdout
    events = cluster.shelly("events", "--session", session)
    assert events.returncode == 0 and events.stdout, events.stderr
