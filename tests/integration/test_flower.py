"""``shelly flower`` against the real Redis and a real ``shelly worker``: the worker and the
``shelly.*`` tasks of a delegated run are readable from Flower's HTTP API, behind basic auth.

Flower learns tasks from the workers' events, so it is started (and seen to know the worker)
before the run is delegated.
"""

from __future__ import annotations

import ast
from typing import Any

import pytest

from tests.conftest import free_port

from .cluster import Cluster, wait_until
from .ops import FLOWER_AUTH, SHELLY, Processes, delegating_team, http_get, run_json, wait_for_http

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture
def flower(cluster: Cluster, procs: Processes) -> str:
    """A worker and ``shelly flower --basic-auth`` in the cluster's project; Flower's base URL."""
    delegating_team(cluster)
    cluster.start_worker("w1")
    return start_flower(procs, "--basic-auth", FLOWER_AUTH)


def start_flower(procs: Processes, *auth: str) -> str:
    """``shelly flower`` as docs/operations.md shows it, on a free port; its base URL once it serves."""
    port = free_port()
    proc = procs.start("flower", [*SHELLY, "flower", "--address", "127.0.0.1", "--port", str(port), *auth])
    url = f"http://127.0.0.1:{port}"
    wait_for_http(f"{url}/healthcheck", proc, f"flower\n{procs.log('flower')}")
    return url


def _task_kwargs(task: dict[str, Any]) -> dict[str, Any]:
    """Flower shows kwargs as Celery's ``saferepr`` of the dict (a Python literal)."""
    kwargs = task.get("kwargs")
    return kwargs if isinstance(kwargs, dict) else ast.literal_eval(kwargs or "{}")


def test_flower_api_lists_the_worker_hostname(cluster: Cluster, flower: str):
    hostname = next(iter(cluster.workers))

    def listed() -> bool:
        status, workers = http_get(f"{flower}/api/workers?refresh=1", FLOWER_AUTH)
        assert status == 200, status
        return hostname in (workers or {})

    wait_until(listed, 60, f"{hostname} in /api/workers")


def test_flower_api_lists_the_run_agent_tasks_with_agent_depth_session_and_preview(
    cluster: Cluster, flower: str, procs: Processes
):
    hostname = next(iter(cluster.workers))
    wait_until(lambda: hostname in (http_get(f"{flower}/api/workers", FLOWER_AUTH)[1] or {}), 60,
               "flower to know the worker")
    out = run_json(cluster, "investigate")

    def helper_task() -> dict[str, Any] | None:
        status, tasks = http_get(f"{flower}/api/tasks?taskname=shelly.run_agent", FLOWER_AUTH)
        assert status == 200, status
        found = [t for t in (tasks or {}).values() if _task_kwargs(t).get("agent") == "helper"]
        return found[0] if found and found[0].get("state") == "SUCCESS" else None

    task = wait_until(helper_task, 60, f"helper's shelly.run_agent task in /api/tasks\n{procs.log('flower')}")
    assert task["name"] == "shelly.run_agent"
    assert task["worker"] == hostname
    assert _task_kwargs(task) == {"agent": "helper", "depth": 1, "session": out["session"],
                                  "preview": "inspect the logs"}


def test_flower_api_refuses_requests_without_credentials(flower: str):
    for path in ("/api/workers", "/api/tasks", "/"):
        assert http_get(f"{flower}{path}")[0] == 401, path
        assert http_get(f"{flower}{path}", "ops:wrong")[0] == 401, path


def test_shelly_flower_without_credentials_exits_2_with_a_clear_message(cluster: Cluster):
    delegating_team(cluster)
    out = cluster.shelly("flower", "--port", str(free_port()), timeout=60)
    assert out.returncode == 2
    assert "flower: authentication is required" in out.stderr
    assert "--basic-auth" in out.stderr and "FLOWER_BASIC_AUTH" in out.stderr


def test_shelly_flower_no_auth_opens_the_ui_but_not_the_api(cluster: Cluster, procs: Processes):
    delegating_team(cluster)
    url = start_flower(procs, "--no-auth")
    assert http_get(f"{url}/workers")[0] == 200
    assert http_get(f"{url}/api/workers")[0] == 401
