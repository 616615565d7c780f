"""What ``shelly doctor`` prints of a Redis or broker URL: never its password."""

from __future__ import annotations

import pytest

from shelly_dist.redisio.server import redact


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://:s3cret@redis:6379/0", "redis://:***@redis:6379/0"),
    ("rediss://app:s3cret@redis.example:6380/0?ssl_cert_reqs=required",
     "rediss://app:***@redis.example:6380/0?ssl_cert_reqs=required"),
    ("amqp://guest:s3cret@[::1]:5672//", "amqp://guest:***@[::1]:5672//"),
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
])
def test_redact_hides_the_password_and_keeps_the_rest(url: str, shown: str) -> None:
    assert redact(url) == shown
