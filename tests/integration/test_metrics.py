"""``shelly worker --metrics-port``: a real worker serves Prometheus text on ``/metrics``, and its
counters move as a delegated run happens on it."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import free_port

from .cluster import Cluster, wait_until
from .ops import delegating_team, run_json

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the worker's ``/metrics``, parsed by prometheus_client's own parser."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
def metrics_port(cluster: Cluster) -> int:
    """A worker of the delegating team serving metrics (port from SHELLY_METRICS_PORT); its port."""
    delegating_team(cluster)
    port = free_port()
    cluster.start_worker("w1", env={"SHELLY_METRICS_PORT": str(port)})
    wait_until(lambda: _answers(port), 30, "the worker's /metrics")
    return port


def _answers(port: int) -> bool:
    try:
        scrape(port)
    except OSError:
        return False
    return True


def test_worker_metrics_count_the_runs_steps_model_calls_and_tools_of_a_delegation(cluster: Cluster,
                                                                                    metrics_port: int):
    before = scrape(metrics_port)
    assert value(before, "shelly_runs_started_total", agent="helper") == 0
    run_json(cluster, "investigate")

    def helper_finished() -> dict | None:
        samples = scrape(metrics_port)
        return samples if value(samples, "shelly_runs_finished_total", agent="helper", outcome="done") == 1 else None

    after = wait_until(helper_finished, 30, "shelly_runs_finished_total{agent=helper,outcome=done} to reach 1")
    assert value(after, "shelly_runs_started_total", agent="helper") == 1
    assert value(after, "shelly_steps_total", agent="helper") >= 1
    assert value(after, "shelly_tool_calls_total", tool="task_complete", outcome="ok") == 1
    assert value(after, "shelly_model_call_duration_seconds_count", provider="team", model="script") >= 1
    assert value(after, "shelly_runs_in_flight") == 0
    assert ("shelly_event_loop_lag_seconds", frozenset()) in after


def test_no_run_or_session_id_is_a_label(cluster: Cluster, metrics_port: int):
    out = run_json(cluster, "investigate")
    wait_until(lambda: value(scrape(metrics_port), "shelly_runs_finished_total", agent="helper", outcome="done"),
               30, "the helper's run to finish")
    ids = {out["session"], *(r["id"] for r in cluster.runs(out["session"]))}
    labels = {v for (_name, pairs) in scrape(metrics_port) for _k, v in pairs}
    assert not labels & ids


def test_metrics_port_is_refused_with_the_prefork_pool(cluster: Cluster):
    delegating_team(cluster)
    out = cluster.shelly("worker", "--pool", "prefork", "--metrics-port", str(free_port()), timeout=60)
    assert out.returncode != 0
    assert "worker: --metrics-port needs the threads or solo pool" in out.stderr
