"""step_time_limit < stop grace period < visibility_timeout, in every recipe we ship.

A worker told to stop finishes its step in flight, so its grace period must outlast the longest
step; and the broker must not redeliver that step to another worker while it still runs, so the
visibility timeout must outlast the grace period (hence the step). docs/operations.md explains.
"""

from __future__ import annotations

import configparser
import re

import pytest
import yaml

from tests.unit.ops.support import ROOT, TARGETS, example_config, find, rendered


def _seconds(value: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)([smh])", value))


@pytest.fixture(scope="module")
def limits() -> tuple[float, float]:
    d = example_config().distributed
    return d.step_time_limit, d.effective_visibility_timeout()


def test_example_config_sets_visibility_above_step_limit(limits: tuple[float, float]) -> None:
    step, visibility = limits
    assert step < visibility


@pytest.mark.parametrize("target", TARGETS)
def test_kubernetes_grace_period_sits_between_step_limit_and_visibility(target: str, limits) -> None:
    step, visibility = limits
    pod = find(rendered(target), "Deployment", "shelly-worker")["spec"]["template"]["spec"]
    assert step < pod["terminationGracePeriodSeconds"] < visibility


def test_compose_grace_period_sits_between_step_limit_and_visibility(limits) -> None:
    step, visibility = limits
    worker = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]["worker"]
    assert step < _seconds(worker["stop_grace_period"]) < visibility


def test_systemd_stop_timeout_sits_between_step_limit_and_visibility(limits) -> None:
    step, visibility = limits
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string((ROOT / "deploy" / "systemd" / "shelly-worker@.service").read_text())
    assert step < float(unit["Service"]["TimeoutStopSec"]) < visibility


@pytest.mark.parametrize("target", ["overlays/production", "overlays/managed-redis"])
def test_autoscaler_scales_down_no_faster_than_a_worker_drains(target: str) -> None:
    docs = rendered(target)
    scaler = next(d for d in docs if d["kind"] in ("ScaledObject", "HorizontalPodAutoscaler"))
    spec = scaler["spec"]
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] if "advanced" in spec else spec["behavior"]
    assert behavior["scaleDown"]["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 120}]
