"""The ``filesystem`` toolbox: Shelly's ``fs_*`` tools behind directory approval.

Every path goes through :meth:`Permissions.check_path` before any I/O (so ``..`` and symlinks
cannot leave an allowed directory), every mutation computes a unified diff (bounded, off the
event loop: :mod:`~shelly_dist.tools.builtin._diff`) and passes
:meth:`Permissions.confirm_change`, and every blocking call runs in a thread. Writes to one path
are serialised by a per-path lock; ``fs_move``/``fs_copy`` take their two locks in sorted order so
two opposite moves cannot deadlock. Existing files keep their mode; new files are created 0600.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, Field

from shelly_dist.errors import ToolError
from shelly_dist.tools.blocking import run_blocking
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
        if path.stat().st_size > MAX_READ:
            raise ToolError(f"{tool}: file exceeds maximum read size of 10 MB: {path}", tool=tool)
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError as exc:
        raise ToolError(f"{tool}: no such file: {path}", tool=tool) from exc
    except IsADirectoryError as exc:
        raise ToolError(f"{tool}: is a directory: {path}", tool=tool) from exc


def _read_or_empty(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def _write_text(path: Path, content: str) -> None:
    """Write keeping an existing file's mode; a new file gets 0600 and its parents are created."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = 0o600
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(content)
    os.chmod(path, mode)


def _list(path: Path) -> str:
    entries = []
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        try:
            is_dir = entry.is_dir()
            size = entry.stat().st_size
        except OSError:
            continue
        entries.append({"name": entry.name, "type": "dir" if is_dir else "file", "size": size})
    return json.dumps(entries)


def _stat(path: Path) -> str:
    st = path.stat()
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
    if path.is_dir() and not path.is_symlink():
        if recursive:
            shutil.rmtree(path)
        elif any(path.iterdir()):
            raise ToolError(f"{tool}: directory not empty (set recursive): {path}", tool=tool)
        else:
            path.rmdir()
    else:
        path.unlink()


def _copy(source: Path, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, destination, symlinks=True)
    else:
        shutil.copy2(source, destination, follow_symlinks=False)


def _move(source: Path, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(source, destination)


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
        except OSError as exc:
            raise ToolError(f"{tool}: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), tool=tool) from exc

    async def rewrite(self, tool: str, raw: str, change) -> str:  # type: ignore[no-untyped-def]
        """Read, transform with ``change(old) -> new``, confirm the diff, write. Returns "ok"."""
        path = await self.perms.check_path(tool, raw)
        async with self.locked(path):
            old = await self.io(tool, _read_text, tool, path)
            new = change(old)
            await self.perms.confirm_change(tool, path, await bounded_diff(tool, old, new, a=f"a/{raw}", b=f"b/{raw}"))
            await self.io(tool, _write_text, path, new)
        return "ok"

    # --- handlers ---

    async def read(self, inp: PathInput) -> str:
        path = await self.perms.check_path("fs_read", inp.path)
        return await self.io("fs_read", _read_text, "fs_read", path)

    async def read_lines(self, inp: ReadLinesInput) -> str:
        path = await self.perms.check_path("fs_read_lines", inp.path)
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
        path = await self.perms.check_path("fs_write", inp.path)
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
        path = await self.perms.check_path("fs_list", inp.path)
        return await self.io("fs_list", _list, path)

    async def delete(self, inp: DeleteInput) -> str:
        path = await self.perms.check_path("fs_delete", inp.path)
        async with self.locked(path):
            await self.perms.confirm_change("fs_delete", path, f"delete {path}")
            await self.io("fs_delete", _delete, "fs_delete", path, inp.recursive)
        return "ok"

    async def _two_paths(self, tool: str, inp: TwoPathInput, fn) -> str:  # type: ignore[no-untyped-def]
        source = await self.perms.check_path(tool, inp.source)
        destination = await self.perms.check_path(tool, inp.destination)
        async with self.locked(source, destination):
            await self.perms.confirm_change(tool, destination, f"{tool} {source} -> {destination}")
            await self.io(tool, fn, source, destination)
        return "ok"

    async def move(self, inp: TwoPathInput) -> str:
        return await self._two_paths("fs_move", inp, _move)

    async def copy(self, inp: TwoPathInput) -> str:
        return await self._two_paths("fs_copy", inp, _copy)

    async def stat(self, inp: PathInput) -> str:
        path = await self.perms.check_path("fs_stat", inp.path)
        return await self.io("fs_stat", _stat, path)

    async def diff(self, inp: DiffInput) -> str:
        a = await self.perms.check_path("fs_diff", inp.file_a)
        b = await self.perms.check_path("fs_diff", inp.file_b)
        old = await self.io("fs_diff", _read_text, "fs_diff", a)
        new = await self.io("fs_diff", _read_text, "fs_diff", b)
        return await bounded_diff("fs_diff", old, new, a=inp.file_a, b=inp.file_b) or "Files are identical."

    async def mkdir(self, inp: PathInput) -> str:
        path = await self.perms.check_path("fs_mkdir", inp.path)
        await self.io("fs_mkdir", lambda: path.mkdir(parents=True, exist_ok=True))
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
