"""The chaos soak's short version (``tests/chaos/soak.py``; ``python -m tests.chaos.soak --minutes
60`` is the long one): five minutes of batches and interactive runs on default settings while a
worker is killed every 30 s, Redis restarted from its AOF, the broker connection cut and the model
answering 429/500; every item and run ends once, nothing runs twice, every key has a TTL."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.soak import soak

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]


def test_five_minutes_of_kills_redis_restarts_broker_cuts_and_model_errors_end_every_item_once(tmp_path: Path):
    report = soak(tmp_path, 5.0, redis_every=90.0, cut_every=45.0)
    print("\n" + report.summary())
    assert len(report.kills) >= 8 and report.redis_restarts >= 3 and report.cuts >= 5
    assert report.items > 0 and report.runs > 0
    # recovery on default settings: lease 10 s + reap interval 2 s, with room for a loaded machine
    assert max(report.recoveries, default=0.0) < 45.0, report.recoveries
