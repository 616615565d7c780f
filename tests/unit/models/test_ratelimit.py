"""The ``rate_limit`` block's settings and Shelly's estimate of a request's input tokens (the limits
themselves are the provider governor's: ``test_governor*.py``)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shelly_dist.chats import Message, Role
from shelly_dist.models import RateLimitSettings
from shelly_dist.models.ratelimit import estimate_tokens


def test_estimate_is_chars_over_4_plus_4_per_message_and_10_per_tool() -> None:
    class T:
        name, description, input_schema = "t", "", {}

    assert estimate_tokens([Message.text("u", Role.USER, "x" * 9)], [T()]) == 3 + 4 + 10


@pytest.mark.parametrize(("value", "seconds"), [("500ms", 0.5), ("2s", 2.0), ("1m", 60.0), (3, 3.0)])
def test_base_delay_accepts_go_durations(value: object, seconds: float) -> None:
    assert RateLimitSettings(base_delay=value).base_delay == seconds  # type: ignore[arg-type]


def test_a_bad_duration_is_rejected() -> None:
    with pytest.raises(ValidationError, match="not a duration"):
        RateLimitSettings(base_delay="soon")  # type: ignore[arg-type]


def test_max_concurrent_is_a_limit_that_throttles() -> None:
    assert RateLimitSettings(max_concurrent=4).throttles and not RateLimitSettings().throttles
