"""The ``filesystem`` toolbox: Shelly's ``fs_*`` tools behind directory approval.

Every path goes through :meth:`Permissions.check_real` before any I/O (so ``..`` and symlinks
cannot leave an allowed directory, and no change reaches ``.shelly/``, the permission store or
``.git/``), the I/O operates on the checked path without following symlinks and writes
atomically (:mod:`._safefs`), every mutation computes a unified diff (bounded, off the event
loop: :mod:`~shelly_dist.tools.builtin._diff`) and passes
:meth:`Permissions.confirm_change`, and every blocking call runs in a thread. Writes to one path
are serialised by a per-path lock; ``fs_move``/``fs_copy`` take their two locks in sorted order so
two opposite moves cannot deadlock. Existing files keep their mode; new files are created 0600.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, Field

from shelly_dist.errors import ToolError
from shelly_dist.tools.blocking import run_blocking
from shelly_dist.tools.builtin import _safefs
from shelly_dist.tools.builtin._diff import bounded_diff
from shelly_dist.tools.permissions import Permissions
from shelly_dist.tools.tool import Tool, tool_from_model
from shelly_dist.tools.toolbox import ToolBox

MAX_READ = 10 << 20
"""fs_read refuses files over 10 MB, as Shelly does."""

READ_ONLY = frozenset({"fs_read", "fs_read_lines", "fs_list", "fs_stat", "fs_diff"})
"""Tools that change nothing, so a crash while one ran can simply run it again."""


class PathInput(BaseModel):
    path: str = Field(description="Path to the file or directory (relative to the project root)")


class ReadLinesInput(PathInput):
    offset: int = Field(default=1, ge=1, description="First line to return (1-based)")
    limit: int = Field(default=100, ge=1, description="Maximum number of lines to return")


class WriteInput(PathInput):
    content: str = Field(description="Full content to write")


class EditInput(PathInput):
    old_text: str = Field(description="Text to find (must appear exactly once)")
    new_text: str = Field(default="", description="Replacement text; empty deletes the matched text")


class Hunk(BaseModel):
    old_text: str = Field(description="Text to find (must appear exactly once when this hunk applies)")
    new_text: str = Field(default="", description="Replacement text; empty deletes")


class PatchInput(PathInput):
    hunks: list[Hunk] = Field(description="Replacements applied in order; all or none are written")


class DeleteInput(PathInput):
    recursive: bool = Field(default=False, description="Delete a non-empty directory and its contents")


class TwoPathInput(BaseModel):
    source: str = Field(description="Source path")
    destination: str = Field(description="Destination path")


class DiffInput(BaseModel):
    file_a: str = Field(description="Original file")
    file_b: str = Field(description="Changed file")


def replace_once(tool: str, content: str, old: str, new: str, *, where: str = "") -> str:
    """``content`` with the single occurrence of ``old`` replaced; Shelly's uniqueness errors."""
    if not old:
        raise ToolError(f"{tool}: {where}old_text is required", tool=tool)
    count = content.count(old)
    if count == 0:
        raise ToolError(f"{tool}: {where}old_text not found in file", tool=tool)
    if count > 1:
        raise ToolError(f"{tool}: {where}old_text appears {count} times, must be unique", tool=tool)
    return content.replace(old, new, 1)


def _read_text(tool: str, path: Path) -> str:
    try:
        data = _safefs.read_bytes(path, MAX_READ)
    except FileNotFoundError as exc:
        raise ToolError(f"{tool}: no such file: {path}", tool=tool) from exc
    except IsADirectoryError as exc:
        raise ToolError(f"{tool}: is a directory: {path}", tool=tool) from exc
    except OSError as exc:
        if exc.errno == errno.EFBIG:
            raise ToolError(f"{tool}: file exceeds maximum read size of 10 MB: {path}", tool=tool) from exc
        raise
    return data.decode("utf-8", errors="replace")


def _read_or_empty(path: Path) -> str:
    """The current text of a file about to be replaced ("" when there is none or it is no regular
    file: the write replaces it)."""
    try:
        return _safefs.read_bytes(path, 1 << 40).decode("utf-8", errors="replace")
    except (FileNotFoundError, _safefs.NotRegular):
        return ""


def _write_text(path: Path, content: str) -> None:
    """Atomic write keeping an existing file's mode; a new file gets 0600 and its parents are created."""
    _safefs.write_atomic(path, content.encode("utf-8"))


def _list(path: Path) -> str:
    entries = [
        {"name": name, "type": "dir" if is_dir else "file", "size": size}
        for name, is_dir, size in _safefs.list_dir(path)
    ]
    return json.dumps(entries)


def _stat(path: Path) -> str:
    st = _safefs.stat_entry(path)
    return json.dumps(
        {
            "name": path.name,
            "size": st.st_size,
            "mode": stat.filemode(st.st_mode),
            "mod_time": datetime.fromtimestamp(st.st_mtime, UTC).isoformat(),
            "is_dir": stat.S_ISDIR(st.st_mode),
        }
    )


def _delete(tool: str, path: Path, recursive: bool) -> None:
    try:
        _safefs.delete(path, recursive=recursive)
    except OSError as exc:
        if exc.errno == errno.ENOTEMPTY:
            raise ToolError(f"{tool}: directory not empty (set recursive): {path}", tool=tool) from exc
        raise


def _lands_inside(source: Path, destination: Path, moving: bool) -> bool:
    """Whether the entry goes into directory ``destination`` (a move, or a file's copy)."""
    return os.path.isdir(destination) and (moving or not os.path.isdir(source))


class _Filesystem:
    def __init__(self, perms: Permissions) -> None:
        self.perms = perms
        self._locks: dict[Path, asyncio.Lock] = {}

    @asynccontextmanager
    async def locked(self, *paths: Path) -> AsyncIterator[None]:
        locks = [self._locks.setdefault(p, asyncio.Lock()) for p in sorted(set(paths))]
        for lock in locks:
            await lock.acquire()
        try:
            yield
        finally:
            for lock in reversed(locks):
                lock.release()

    async def io(self, tool: str, fn, *args):  # type: ignore[no-untyped-def]
        """Run blocking ``fn`` on a tool I/O thread, under its deadline (:mod:`shelly_dist.tools.blocking`);
        OS errors become ``ToolError`` naming the tool."""
        try:
            return await run_blocking(tool, fn, *args)
        except ToolError:
            raise
        except FileNotFoundError as exc:
            raise ToolError(f"{tool}: no such file or directory: {exc.filename}", tool=tool) from exc
        except (_safefs.PathSwapped, _safefs.NotRegular) as exc:
            raise ToolError(f"{tool}: {exc.strerror}: {exc.filename}", tool=tool) from exc
        except OSError as exc:
            raise ToolError(f"{tool}: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), tool=tool) from exc

    async def rewrite(self, tool: str, raw: str, change) -> str:  # type: ignore[no-untyped-def]
        """Read, transform with ``change(old) -> new``, confirm the diff, write. Returns "ok"."""
        path = await self.perms.check_real(tool, raw, change=True)
        async with self.locked(path):
            old = await self.io(tool, _read_text, tool, path)
            new = change(old)
            await self.perms.confirm_change(tool, path, await bounded_diff(tool, old, new, a=f"a/{raw}", b=f"b/{raw}"))
            await self.io(tool, _write_text, path, new)
        return "ok"

    # --- handlers ---

    async def read(self, inp: PathInput) -> str:
        path = await self.perms.check_real("fs_read", inp.path, change=False)
        return await self.io("fs_read", _read_text, "fs_read", path)

    async def read_lines(self, inp: ReadLinesInput) -> str:
        path = await self.perms.check_real("fs_read_lines", inp.path, change=False)
        lines = (await self.io("fs_read_lines", _read_text, "fs_read_lines", path)).splitlines()
        total = len(lines)
        if inp.offset > max(total, 1):
            raise ToolError(
                f"fs_read_lines: offset {inp.offset} is beyond the end of the file ({total} lines)",
                tool="fs_read_lines",
            )
        chosen = lines[inp.offset - 1 : inp.offset - 1 + inp.limit]
        last = inp.offset + len(chosen) - 1
        body = "\n".join(f"{inp.offset + i:6d}→{line}" for i, line in enumerate(chosen))
        return f"[Lines {inp.offset}-{last} of {total}]\n{body}"

    async def write(self, inp: WriteInput) -> str:
        path = await self.perms.check_real("fs_write", inp.path, change=True)
        async with self.locked(path):
            old = await self.io("fs_write", _read_or_empty, path)
            diff = await bounded_diff("fs_write", old, inp.content, a=f"a/{inp.path}", b=f"b/{inp.path}")
            await self.perms.confirm_change("fs_write", path, diff)
            await self.io("fs_write", _write_text, path, inp.content)
        return "ok"

    async def edit(self, inp: EditInput) -> str:
        return await self.rewrite(
            "fs_edit", inp.path, lambda old: replace_once("fs_edit", old, inp.old_text, inp.new_text)
        )

    async def patch(self, inp: PatchInput) -> str:
        def apply(content: str) -> str:
            for n, hunk in enumerate(inp.hunks, 1):
                content = replace_once("fs_patch", content, hunk.old_text, hunk.new_text, where=f"hunk {n}: ")
            return content

        if not inp.hunks:
            raise ToolError("fs_patch: hunks is required", tool="fs_patch")
        return await self.rewrite("fs_patch", inp.path, apply)

    async def list(self, inp: PathInput) -> str:
        path = await self.perms.check_real("fs_list", inp.path, change=False)
        return await self.io("fs_list", _list, path)

    async def delete(self, inp: DeleteInput) -> str:
        path = await self.perms.check_real("fs_delete", inp.path, change=True, tree=True, follow=False)
        async with self.locked(path):
            await self.perms.confirm_change("fs_delete", path, f"delete {path}")
            await self.io("fs_delete", _delete, "fs_delete", path, inp.recursive)
        return "ok"

    async def _two_paths(self, tool: str, inp: TwoPathInput, fn) -> str:  # type: ignore[no-untyped-def]
        moving = tool == "fs_move"
        source = await self.perms.check_real(tool, inp.source, change=moving, tree=moving, follow=False)
        destination = await self.perms.check_real(tool, inp.destination, change=True)
        landed = await self.io(tool, _lands_inside, source, destination, moving)
        if landed:
            destination = destination / source.name
        if reason := self.perms.protection(destination):
            raise ToolError(f"{tool}: refused: {inp.destination} {reason}", tool=tool)
        if landed:
            await self.perms.check_control(tool, f"{inp.destination}/{source.name}", destination)
        async with self.locked(source, destination):
            await self.perms.confirm_change(tool, destination, f"{tool} {source} -> {destination}")
            await self.io(tool, fn, source, destination)
        return "ok"

    async def move(self, inp: TwoPathInput) -> str:
        return await self._two_paths("fs_move", inp, _safefs.move)

    async def copy(self, inp: TwoPathInput) -> str:
        return await self._two_paths("fs_copy", inp, _safefs.copy)

    async def stat(self, inp: PathInput) -> str:
        path = await self.perms.check_real("fs_stat", inp.path, change=False)
        return await self.io("fs_stat", _stat, path)

    async def diff(self, inp: DiffInput) -> str:
        a = await self.perms.check_real("fs_diff", inp.file_a, change=False)
        b = await self.perms.check_real("fs_diff", inp.file_b, change=False)
        old = await self.io("fs_diff", _read_text, "fs_diff", a)
        new = await self.io("fs_diff", _read_text, "fs_diff", b)
        return await bounded_diff("fs_diff", old, new, a=inp.file_a, b=inp.file_b) or "Files are identical."

    async def mkdir(self, inp: PathInput) -> str:
        path = await self.perms.check_real("fs_mkdir", inp.path, change=True)
        await self.io("fs_mkdir", _safefs.make_dirs, path)
        return "ok"


def filesystem_toolbox(perms: Permissions, *, root: Path | None = None) -> ToolBox:
    """The ``filesystem`` toolbox (group ``fs``). Relative paths resolve against ``perms.root``.

    ``root`` is accepted for symmetry with the other factories; it must equal ``perms.root``.
    """
    fs = _Filesystem(perms)
    specs: list[tuple[str, str, type[BaseModel], object]] = [
        ("fs_read", "Read the full text of a file (up to 10 MB).", PathInput, fs.read),
        (
            "fs_read_lines",
            "Read a range of lines of a file, numbered; use for large files.",
            ReadLinesInput,
            fs.read_lines,
        ),
        (
            "fs_write",
            "Write content to a file, creating parent directories; for targeted edits prefer fs_edit.",
            WriteInput,
            fs.write,
        ),
        (
            "fs_edit",
            "Replace text in a file; old_text must appear exactly once. Empty new_text deletes it.",
            EditInput,
            fs.edit,
        ),
        (
            "fs_patch",
            "Apply several find-and-replace hunks to a file, in order, all or none.",
            PatchInput,
            fs.patch,
        ),
        ("fs_list", "List a directory (non-recursive) as JSON [{name, type, size}].", PathInput, fs.list),
        (
            "fs_delete",
            "Delete a file, or a directory (recursive for a non-empty one).",
            DeleteInput,
            fs.delete,
        ),
        ("fs_move", "Move or rename a file or directory.", TwoPathInput, fs.move),
        ("fs_copy", "Copy a file or directory.", TwoPathInput, fs.copy),
        ("fs_stat", "File metadata as JSON {name, size, mode, mod_time, is_dir}.", PathInput, fs.stat),
        ("fs_diff", "Unified diff between two files.", DiffInput, fs.diff),
        ("fs_mkdir", "Create a directory and its parents.", PathInput, fs.mkdir),
    ]
    tools: list[Tool] = [
        tool_from_model(name, desc, model, fn, group="fs", retry_on_crash=name in READ_ONLY)  # type: ignore[arg-type]
        for name, desc, model, fn in specs
    ]
    return ToolBox(tools, name="filesystem")
