"""Which hosts count as loopback for ``shelly mcp serve`` (anything else needs a token)."""

from __future__ import annotations

import pytest

from shelly_dist.tools.mcp.bearer import is_loopback


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_loopback_hosts_need_no_token(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "mcp.example.com"])
def test_every_other_host_needs_a_token(host: str) -> None:
    assert not is_loopback(host)
