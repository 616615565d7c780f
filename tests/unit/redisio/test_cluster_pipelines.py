"""A Redis Cluster client refuses ``PUBLISH`` inside a pipeline (redis-py blocks it: a pipeline
is routed by key, a channel has none), so no pipeline of the package publishes; announcements go
out one by one after the writes they announce."""

from __future__ import annotations

import re
from pathlib import Path

import shelly_dist


def test_no_pipeline_publishes() -> None:
    root = Path(shelly_dist.__file__).parent
    offenders = [f"{path.relative_to(root)}:{n}" for path in sorted(root.rglob("*.py"))
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if re.search(r"\bpipe\.publish\(", line)]
    assert offenders == []
