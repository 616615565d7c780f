"""The terminal prompt of ``shelly run``: line reading that a timeout cannot break, option picks."""

from __future__ import annotations

import asyncio
import os

import pytest

from shelly_dist.cli.prompt import choose, read_line
from shelly_dist.tools.builtin.ask import Question


async def test_a_cancelled_read_leaves_no_reader_to_swallow_the_next_answer() -> None:
    r, w = os.pipe()
    try:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                await read_line(r)  # nobody answers this question
        os.write(w, b"second answer\n")
        assert await read_line(r) == "second answer"
    finally:
        os.close(r)
        os.close(w)


def question(multi: bool = False, most: int = 0) -> Question:
    return Question(id="q-1", text="Pick", options=["red", "green", "blue"], multi_select=multi, max_selections=most)


def test_a_number_picks_that_option() -> None:
    assert choose(question(), "2") == "green"


def test_several_numbers_pick_several_options_joined_as_shelly_does() -> None:
    assert choose(question(multi=True), "1, 3") == "red, blue"


def test_anything_else_is_the_users_own_answer() -> None:
    assert choose(question(), "9") == "9"
    assert choose(question(), "teal") == "teal"
    assert choose(question(multi=True, most=1), "1,2") == "1,2"
