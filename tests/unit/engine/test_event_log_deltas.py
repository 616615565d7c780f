"""An embedded session's event log keeps a streamed reply as merged deltas, not a line a token."""

from __future__ import annotations

import json
from pathlib import Path

from shelly_dist.engine.event_log import _append, events_path
from shelly_dist.events import MESSAGE_ADDED, MESSAGE_DELTA, Event

SESSION = "0123456789abcdef"


def delta(text: str, **data: object) -> Event:
    return Event(kind=MESSAGE_DELTA, agent="w", run_id="r1", session_id=SESSION, data={"text": text, **data})


def test_a_burst_of_deltas_is_one_line_and_a_restart_its_own(tmp_path: Path) -> None:
    _append(tmp_path, [delta("", begin=True), delta("Blue "), delta("light"), delta("B", begin=True),
                       Event(kind=MESSAGE_ADDED, agent="w", run_id="r1", session_id=SESSION, data={"text": "B"})])
    lines = [json.loads(line) for line in events_path(tmp_path, SESSION).read_text().splitlines()]
    assert [(e["kind"], e["data"]) for e in lines] == [
        (MESSAGE_DELTA, {"text": "Blue light", "begin": True}), (MESSAGE_DELTA, {"text": "B", "begin": True}),
        (MESSAGE_ADDED, {"text": "B"})]
