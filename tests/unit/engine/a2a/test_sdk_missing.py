"""Without the ``a2a`` extra, A2A commands fail with one line naming the pip command."""

from __future__ import annotations

import sys

import pytest

from shelly_dist.engine.a2a import require_sdk
from shelly_dist.errors import UsageError


def test_a_missing_sdk_names_the_pip_line(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "a2a.server", None)  # import fails as if not installed
    with pytest.raises(UsageError, match=r"a2a serve: the A2A SDK \(a2a-sdk\) is not installed: "
                                         r"pip install 'shelly-dist\[a2a\]'"):
        require_sdk("a2a serve")
