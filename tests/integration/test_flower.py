"""``shelly flower`` against the real Redis and a real ``shelly worker``: the worker and the
``shelly.*`` tasks of a delegated run are readable from Flower's HTTP API, behind basic auth.

Flower learns tasks from the workers' events, so the worker sends them (``shelly worker -E``:
they are off by default, as in Celery) and Flower is started (and seen to know the worker) before
the run is delegated.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port

from .cluster import Cluster, delegate, scripted, wait_until
from .ops import FLOWER_AUTH, SHELLY, Processes, delegating_team, http_get, run_json, wait_for_http

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture
def flower(cluster: Cluster, procs: Processes) -> str:
    """A worker sending task events and ``shelly flower`` with SHELLY_FLOWER_BASIC_AUTH in the
    cluster's project; its base URL."""
    delegating_team(cluster)
    cluster.start_worker("w1", args=("-E",))
    return start_flower(procs, env={"SHELLY_FLOWER_BASIC_AUTH": FLOWER_AUTH})


def start_flower(procs: Processes, *args: str, env: dict[str, str] | None = None) -> str:
    """``shelly flower`` as docs/operations.md shows it, on a free port; its base URL once it serves."""
    port = free_port()
    argv = [*SHELLY, "flower", "--address", "127.0.0.1", "--port", str(port), *args]
    proc = procs.start("flower", argv, env=env)
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
        found = [t for t in _tasks(flower) if _task_kwargs(t).get("agent") == "helper"]
        return found[0] if found and found[0].get("state") == "SUCCESS" else None

    task = wait_until(helper_task, 60, f"helper's shelly.run_agent task in /api/tasks\n{procs.log('flower')}")
    assert task["name"] == "shelly.run_agent[helper]"
    assert task["worker"] == hostname
    assert _task_kwargs(task) == {"agent": "helper", "depth": 1, "session": out["session"],
                                  "preview": "inspect the logs"}


def _tasks(flower: str) -> list[dict[str, Any]]:
    status, tasks = http_get(f"{flower}/api/tasks", FLOWER_AUTH)
    assert status == 200, status
    return list((tasks or {}).values())


def test_a_failed_agent_run_is_a_failure_in_flower_with_its_reason(cluster: Cluster, procs: Processes):
    cluster.write_config(
        [scripted(lead=[delegate(("helper", "inspect the logs")), "lead done"],
                  helper=[{"error": "the model broke down"}])],
        [{"name": "lead", "description": "delegates", "options": {"max_delegation_depth": 1}},
         {"name": "helper", "description": "helps"}],
    )
    hostname = cluster.start_worker("w1", args=("-E",))  # task events: off by default
    flower = start_flower(procs, env={"SHELLY_FLOWER_BASIC_AUTH": FLOWER_AUTH})
    wait_until(lambda: hostname in (http_get(f"{flower}/api/workers", FLOWER_AUTH)[1] or {}), 60,
               "flower to know the worker")
    run_json(cluster, "investigate")

    def helper_task() -> dict[str, Any] | None:
        found = [t for t in _tasks(flower) if _task_kwargs(t).get("agent") == "helper" and t.get("state")
                 in ("SUCCESS", "FAILURE")]
        return found[0] if found else None

    task = wait_until(helper_task, 60, f"helper's task to end in /api/tasks\n{procs.log('flower')}")
    assert task["state"] == "FAILURE", task
    assert "failed" in task["exception"] and "the model broke down" in task["exception"], task
    assert task["name"] == "shelly.run_agent[helper]"


def test_flower_api_refuses_requests_without_credentials(flower: str):
    for path in ("/api/workers", "/api/tasks", "/"):
        assert http_get(f"{flower}{path}")[0] == 401, path
        assert http_get(f"{flower}{path}", "ops:wrong")[0] == 401, path


def test_shelly_flower_without_credentials_exits_2_with_a_clear_message(cluster: Cluster):
    delegating_team(cluster)
    out = cluster.shelly("flower", "--port", str(free_port()), timeout=60)
    assert out.returncode == 2
    assert "flower: authentication is required" in out.stderr
    assert "SHELLY_FLOWER_BASIC_AUTH" in out.stderr


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def test_flower_credentials_from_the_environment_are_not_on_its_command_line(
    cluster: Cluster, procs: Processes, flower: str
):
    """Flower serves behind the credentials, yet ps shows neither user nor password."""
    assert http_get(f"{flower}/api/workers", FLOWER_AUTH)[0] == 200
    assert http_get(f"{flower}/api/workers", "ops:wrong")[0] == 401
    shown = cmdline(procs.procs["flower"].pid)
    assert "flower" in shown and FLOWER_AUTH.split(":")[1] not in shown


def test_basic_auth_given_on_shellys_command_line_is_not_on_flowers(cluster: Cluster, procs: Processes):
    delegating_team(cluster)
    url = start_flower(procs, "--basic-auth", FLOWER_AUTH)
    assert http_get(f"{url}/api/workers", FLOWER_AUTH)[0] == 200
    assert FLOWER_AUTH.split(":")[1] not in cmdline(procs.procs["flower"].pid)


def test_shelly_flower_no_auth_opens_the_ui_but_not_the_api(cluster: Cluster, procs: Processes):
    delegating_team(cluster)
    url = start_flower(procs, "--no-auth")
    assert http_get(f"{url}/workers")[0] == 200
    assert http_get(f"{url}/api/workers")[0] == 401
