"""Schedules: parsing wakeup values and computing cron times."""

from __future__ import annotations

from datetime import datetime

import pytest

from shelly_dist.errors import ConfigError
from shelly_dist.workspace.schedule import DEFAULT_WAKEUP_PROMPT, cron_next, parse_wakeup


@pytest.mark.parametrize(("spec", "seconds"), [("30s", 30), ("5m", 300), ("2h", 7200)])
def test_an_interval_wakeup_is_seconds_of_idleness(spec: str, seconds: float) -> None:
    schedule = parse_wakeup(spec)
    assert schedule.every == seconds and schedule.prompt == DEFAULT_WAKEUP_PROMPT


@pytest.mark.parametrize("spec", ["every day", "0 9 * *", "61 * * * *", "* * * * 1-9", "*/0 * * * *", "5x"])
def test_an_invalid_wakeup_is_a_config_error_naming_it(spec: str) -> None:
    with pytest.raises(ConfigError, match="wakeup"):
        parse_wakeup(spec)


@pytest.mark.parametrize("spec", ["0.001s", "0s", "0.5s"])
def test_an_interval_wakeup_under_a_second_is_a_config_error_naming_the_minimum(spec: str) -> None:
    with pytest.raises(ConfigError, match=r"shorter than 1s"):
        parse_wakeup(spec)


def test_a_weekday_cron_skips_the_weekend() -> None:
    friday_evening = datetime(2026, 11, 27, 18, 0).timestamp()
    assert datetime.fromtimestamp(cron_next("0 9 * * 1-5", friday_evening)) == datetime(2026, 11, 30, 9, 0)


def test_a_stepped_cron_fires_at_its_next_step() -> None:
    at = datetime(2026, 1, 1, 10, 7, 30).timestamp()
    assert datetime.fromtimestamp(cron_next("*/15 * * * *", at)) == datetime(2026, 1, 1, 10, 15)


def test_an_interval_is_due_that_long_after_the_last_activity() -> None:
    schedule = parse_wakeup("5m")
    assert schedule.next_due(1000.0, 900.0) == 1200.0
    assert schedule.next_due(1000.0, 0.0) == 1300.0
