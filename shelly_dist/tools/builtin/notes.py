"""The ``notes`` toolbox: short named notes an agent keeps across runs in ``.shelly/local/notes``.

Names are restricted to ``[a-zA-Z0-9_-]+`` so a name can never become a path outside the notes
directory; that is the whole access model, so notes need no directory approval.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path

from pydantic import BaseModel, Field, field_validator

from shelly_dist.errors import ToolError
from shelly_dist.tools.blocking import run_blocking
from shelly_dist.tools.tool import tool_from_model
from shelly_dist.tools.toolbox import ToolBox

NAME = re.compile(r"^[a-zA-Z0-9_-]+$")
PREVIEW = 80


class NameInput(BaseModel):
    name: str = Field(description="Note name: letters, digits, '_' and '-' only")

    @field_validator("name")
    @classmethod
    def _valid_name(cls, v: str) -> str:
        if not NAME.fullmatch(v):  # match with $ accepts a trailing newline
            raise ValueError("must match ^[a-zA-Z0-9_-]+$")
        return v


class WriteNoteInput(NameInput):
    content: str = Field(description="Note content (markdown); replaces any previous content")


class ListNotesInput(BaseModel):
    pass


def _write(path: Path, content: str) -> None:
    """Replace the note whole: written to a file of its own, then renamed over the note, so agents
    writing the same note at once (sibling children) leave one of their notes, never a mix of
    two, and a reader never sees a half-written one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(content)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _list(directory: Path) -> str:
    if not directory.is_dir():
        return "No notes found."
    lines = []
    for path in sorted(directory.glob("*.md")):
        text = path.read_text(encoding="utf-8", errors="replace")
        first = text.splitlines()[0] if text else ""
        lines.append(f"- {path.stem}: {first[:PREVIEW]}")
    return "\n".join(lines) if lines else "No notes found."


def notes_toolbox(notes_dir: Path) -> ToolBox:
    """The ``notes`` toolbox (group ``notes``) storing ``<notes_dir>/<name>.md``."""

    async def write_note(inp: WriteNoteInput) -> str:
        await run_blocking("write_note", _write, notes_dir / f"{inp.name}.md", inp.content)
        return f'Note "{inp.name}" saved.'

    async def read_note(inp: NameInput) -> str:
        try:
            return await run_blocking("read_note", (notes_dir / f"{inp.name}.md").read_text, "utf-8")
        except FileNotFoundError as exc:
            raise ToolError(f'read_note: note "{inp.name}" not found', tool="read_note") from exc

    async def list_notes(inp: ListNotesInput) -> str:
        return await run_blocking("list_notes", _list, notes_dir)

    return ToolBox(
        [
            tool_from_model(
                "write_note",
                "Save a named note (replaces it if it exists).",
                WriteNoteInput,
                write_note,
                group="notes",
                retry_on_crash=True,  # replaces the note: running it twice leaves the same note
            ),
            tool_from_model(
                "read_note", "Read a note by name.", NameInput, read_note, group="notes", retry_on_crash=True
            ),
            tool_from_model(
                "list_notes", "List notes with their first line.", ListNotesInput, list_notes, group="notes",
                retry_on_crash=True,
            ),
        ],
        name="notes",
    )
