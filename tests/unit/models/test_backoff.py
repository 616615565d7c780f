"""Backoff: ``max(base·2^n, Retry-After)`` with ±25 % jitter."""

from __future__ import annotations

import pytest

from shelly_dist.models import Backoff


def mid() -> float:
    return 0.5


@pytest.mark.parametrize(("attempt", "delay"), [(0, 1.0), (1, 2.0), (2, 4.0), (3, 8.0)])
def test_delay_doubles_per_attempt(attempt: int, delay: float) -> None:
    assert Backoff(base=1.0, rand=mid).delay(attempt) == delay


def test_retry_after_beats_a_smaller_base() -> None:
    assert Backoff(base=1.0, rand=mid).delay(0, retry_after=10.0) == 10.0


def test_a_smaller_retry_after_does_not_shorten_the_backoff() -> None:
    assert Backoff(base=1.0, rand=mid).delay(3, retry_after=2.0) == 8.0


@pytest.mark.parametrize(("r", "delay"), [(0.0, 0.75), (0.999999, 1.25)])
def test_jitter_stays_within_a_quarter(r: float, delay: float) -> None:
    assert Backoff(base=1.0, rand=lambda: r).delay(0) == pytest.approx(delay, abs=1e-5)
