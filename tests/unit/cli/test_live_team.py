"""The live view shows a team's wakes, posts and acks: as lines in plain mode, under the table live."""

from __future__ import annotations

import io

from rich.console import Console

from shelly_dist import events
from shelly_dist.cli.live import LiveView
from shelly_dist.engine import EventBus
from shelly_dist.events import Event

TEAM = [
    Event(kind=events.CHANNEL_POST, agent="user", session_id="s", data={"id": 1, "content": "@coder fix it"}),
    Event(kind=events.WAKE_STARTED, agent="coder", session_id="s", data={"messages": 1, "attempt": 1, "up_to": 1}),
    Event(kind=events.CHANNEL_POST, agent="coder", session_id="s", data={"id": 2, "content": "@reviewer ready"}),
    Event(kind=events.INBOX_ACK, agent="coder", session_id="s", data={"until": 1, "cursor": 1}),
    Event(kind=events.WAKE_FINISHED, agent="coder", session_id="s", data={"outcome": "done", "up_to": 1}),
]


async def shown(mode: str) -> str:
    out = io.StringIO()
    console = Console(file=out, force_terminal=mode == "live", width=120, color_system=None)
    bus = EventBus()
    async with LiveView(bus, console, mode):
        for event in TEAM:
            bus.publish(event)
    return out.getvalue()


async def test_the_live_table_shows_the_teams_wakes_posts_and_acks_under_its_rows() -> None:
    text = await shown("live")
    for line in ("#1 @user: @coder fix it", "⏰ coder woken for 1 message(s)", "#2 @coder: @reviewer ready",
                 "✓ coder acked up to #1", "✔ coder wake done"):
        assert line in text
    assert "wake done" in text.split("team")[0]  # the coder's row says where its wake is


async def test_plain_mode_prints_one_line_per_post_wake_and_ack() -> None:
    assert (await shown("plain")).splitlines() == [
        "  #1 @user: @coder fix it", "⏰ coder woken for 1 message(s)", "  #2 @coder: @reviewer ready",
        "✓ coder acked up to #1", "✔ coder wake done"]
