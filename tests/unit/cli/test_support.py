"""The exit-code mapping, the ``.env`` reader and the live view's bookkeeping."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click
import pytest
from rich.console import Console

from shelly_dist import events
from shelly_dist.cli.dotenv import load_dotenv, parse_dotenv
from shelly_dist.cli.errors import exit_code
from shelly_dist.cli.live import Board, LiveView
from shelly_dist.engine import EventBus
from shelly_dist.errors import ConfigError, ModelError, RunCancelled, StoreError, UsageError
from shelly_dist.events import Event


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (ModelError("x"), 1),
        (StoreError("x"), 1),
        (RuntimeError("x"), 1),
        (ConfigError("x"), 2),
        (UsageError("x"), 2),
        (click.UsageError("x"), 2),
        (KeyboardInterrupt(), 130),
        (asyncio.CancelledError(), 130),
        (RunCancelled("x"), 130),
    ],
)
def test_exit_code_maps_each_error_kind(exc: BaseException, code: int) -> None:
    assert exit_code(exc) == code


def test_dotenv_parses_quotes_exports_and_comments() -> None:
    text = "# c\nexport A=1\nB='two words'\nC=\"x\\ny\"\nD=val # note\nbad line\n"
    assert parse_dotenv(text) == {"A": "1", "B": "two words", "C": "x\ny", "D": "val"}


def test_dotenv_never_overrides_the_real_environment(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("KEEP=file\nNEW=file\n")
    env = {"KEEP": "real"}
    assert load_dotenv(tmp_path / ".env", env) == 1
    assert env == {"KEEP": "real", "NEW": "file"}


def test_board_tracks_depth_status_action_and_tokens() -> None:
    board = Board()
    board.apply(Event(kind=events.AGENT_START, agent="kid", data={"depth": 1}))
    board.apply(Event(kind=events.MESSAGE_ADDED, agent="kid", data={
        "role": "assistant", "tool_calls": ["fs_read"], "usage": {"input_tokens": 10, "output_tokens": 5}}))
    line = board.apply(Event(kind=events.TOOL_CALL_START, agent="kid", data={"tool": "fs_read"}))
    row = board.rows["kid"]
    assert (row.depth, row.status, row.action, row.tokens) == (1, "running", "→ fs_read", 15)
    assert line is not None and "fs_read" in line
    board.apply(Event(kind=events.AGENT_END, agent="kid"))
    assert board.rows["kid"].status == "done"


async def test_plain_live_view_prints_lines_for_published_events() -> None:
    bus, console = EventBus(), Console(record=True, width=100, force_terminal=False)
    async with LiveView(bus, console, "plain"):
        bus.publish(Event(kind=events.AGENT_START, agent="top", data={"depth": 0}))
        bus.publish(Event(kind=events.AGENT_END, agent="top"))
    text = console.export_text()
    assert "top started" in text and "top finished" in text


async def test_quiet_live_view_subscribes_to_nothing() -> None:
    bus = EventBus()
    async with LiveView(bus, Console(record=True), "quiet"):
        assert len(bus) == 0
