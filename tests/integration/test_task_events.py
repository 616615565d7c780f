"""Celery's task events are off unless asked for (``shelly worker -E``), as in Celery: a real
``shelly worker`` asked through Celery's own ``inspect conf``."""

from __future__ import annotations

import json
import subprocess

import pytest

from .cluster import Cluster
from .ops import CELERY, delegating_team

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def sends_task_events(cluster: Cluster, hostname: str) -> bool:
    out = subprocess.run([*CELERY, "inspect", "conf", "--destination", hostname, "--json", "--timeout", "10"],
                         cwd=cluster.root, env=cluster.env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return bool(json.loads(out.stdout)[hostname].get("worker_send_task_events"))


def test_a_worker_sends_no_task_events_by_default(cluster: Cluster):
    delegating_team(cluster)
    assert not sends_task_events(cluster, cluster.start_worker("w1"))


def test_shelly_worker_dash_e_sends_task_events(cluster: Cluster):
    delegating_team(cluster)
    assert sends_task_events(cluster, cluster.start_worker("w1", args=("-E",)))
