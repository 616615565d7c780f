"""The scaling row's ceilings: where each single process would cap the pool."""

from __future__ import annotations

from bench.scaling import ceilings


def test_a_process_with_a_tenth_of_the_workers_cpu_caps_the_pool_at_ten_worker_processes() -> None:
    assert ceilings(3.0, {"journals' Redis": 0.3}).endswith("journals' Redis 10")


def test_a_process_that_used_no_cpu_caps_nothing() -> None:
    assert ceilings(3.0, {"coordinator": 0.0}).endswith("coordinator –")


def test_every_single_process_gets_its_ceiling_in_the_order_given() -> None:
    line = ceilings(4.0, {"coordinator": 0.02, "Redis": 0.5, "broker": 0.2})
    assert line.endswith("coordinator 200, Redis 8, broker 20")
