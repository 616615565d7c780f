"""Notes: save, read, list, and names that cannot become paths."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from shelly_dist.errors import ToolError
from shelly_dist.tools.builtin import notes_toolbox
from tests.unit.tools.conftest import call


async def test_write_then_read_a_note(tmp_path: Path) -> None:
    tb = notes_toolbox(tmp_path / "notes")
    assert await call(tb, "write_note", name="plan", content="step 1\nstep 2") == 'Note "plan" saved.'
    assert (tmp_path / "notes" / "plan.md").read_text() == "step 1\nstep 2"
    assert await call(tb, "read_note", name="plan") == "step 1\nstep 2"


async def test_list_shows_first_line_cut_at_80(tmp_path: Path) -> None:
    tb = notes_toolbox(tmp_path)
    await call(tb, "write_note", name="b", content="y" * 100 + "\nmore")
    await call(tb, "write_note", name="a", content="first\nsecond")
    assert await call(tb, "list_notes") == f"- a: first\n- b: {'y' * 80}"


async def test_list_without_notes(tmp_path: Path) -> None:
    assert await call(notes_toolbox(tmp_path / "none"), "list_notes") == "No notes found."


async def test_name_with_path_characters_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=r"^write_note: invalid input: name"):
        await call(notes_toolbox(tmp_path), "write_note", name="../evil", content="x")


async def test_a_name_with_a_trailing_newline_is_rejected_and_no_file_is_made(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=r"^write_note: invalid input: name"):
        await call(notes_toolbox(tmp_path), "write_note", name="plan\n", content="x")
    assert os.listdir(tmp_path) == []


async def test_missing_note_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=r'^read_note: note "nope" not found$'):
        await call(notes_toolbox(tmp_path), "read_note", name="nope")


async def test_agents_writing_one_note_at_once_leave_one_whole_note(tmp_path: Path) -> None:
    box = notes_toolbox(tmp_path)
    contents = [f"found {word} part" + "." * (i * 4000) for i, word in enumerate(["first", "second", "third"])]
    for _ in range(30):  # sibling children writing the same note at the same moment
        await asyncio.gather(*(call(box, "write_note", name="finding", content=c) for c in contents))
        assert (tmp_path / "finding.md").read_text(encoding="utf-8") in contents
    assert os.listdir(tmp_path) == ["finding.md"]  # no temporary file left behind
