"""Error classification helpers that need no server (statuses are tested against one)."""

from __future__ import annotations

import pytest

from shelly_dist.errors import ContextTooLong, ModelError, ModelHTTPError
from shelly_dist.models.classify import error_kind, is_transient, parse_retry_after, should_fall_back


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("5", 5.0), ("1.5", 1.5), (" 0 ", 0.0), ("-3", 0.0), (None, None), ("", None), ("soon", None)],
)
def test_retry_after_in_seconds(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value) == seconds


def test_retry_after_as_an_http_date_counts_from_now() -> None:
    now = 1445412480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now=now) == 30.0


@pytest.mark.parametrize(
    ("kind", "transient", "falls_back"),
    [
        ("rate_limit", True, True),
        ("overloaded", True, True),
        ("server", True, True),
        ("timeout", True, True),
        ("network", True, True),
        ("billing", False, True),
        ("auth", False, False),
        ("bad_request", False, False),
    ],
)
def test_kinds_decide_retry_and_fallback(kind: str, transient: bool, falls_back: bool) -> None:
    exc = ModelHTTPError("x", kind=kind)
    assert (is_transient(exc), should_fall_back(exc)) == (transient, falls_back)


def test_context_overflow_and_plain_errors_are_neither_retried_nor_fallen_back() -> None:
    for exc in (ContextTooLong("x"), ModelError("x"), ValueError("x")):
        assert not is_transient(exc) and not should_fall_back(exc)
    assert error_kind(ContextTooLong("x")) == "context_overflow"
