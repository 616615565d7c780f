"""Where a stdio MCP server's stderr goes when ours is not a real file (a Celery worker's proxy)."""

from __future__ import annotations

import io
import sys

import pytest

from shelly_dist.tools.mcp.client import server_errlog


class LoggingProxyLike(io.TextIOBase):
    """Like Celery's ``LoggingProxy``: writable, but with no file descriptor."""

    def fileno(self) -> int:
        raise io.UnsupportedOperation("fileno")


def test_errlog_is_our_stderr_when_it_has_a_descriptor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", sys.__stderr__)
    assert server_errlog() is sys.__stderr__


def test_errlog_falls_back_to_the_real_stderr_when_stderr_is_a_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", LoggingProxyLike())
    errlog = server_errlog()
    assert errlog is sys.__stderr__
    assert errlog.fileno() >= 0
