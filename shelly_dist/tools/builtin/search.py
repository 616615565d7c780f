"""The ``search`` toolbox: ``search_content`` (regex over file contents) and ``search_files`` (glob).

Both gate on directory approval like the filesystem tools (group ``fs``). The walk never follows
a symlinked directory and skips any file whose resolved path leaves the searched directory, so a
symlink cannot smuggle an unapproved file into the results. Binary files (a NUL byte in the first
8 KB) are skipped, and matched content is capped at 1 MB in total.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, Field

from shelly_dist.errors import ToolError
from shelly_dist.tools.permissions import Permissions, path_within
from shelly_dist.tools.tool import tool_from_model
from shelly_dist.tools.toolbox import ToolBox

CONTENT_CAP = 1 << 20
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn"})


class ContentInput(BaseModel):
    pattern: str = Field(description="Regular expression to search for (Python re syntax)")
    directory: str = Field(description="Directory to search recursively")
    max_results: int = Field(default=100, ge=1, description="Maximum number of matches")
    context_lines: int = Field(default=0, ge=0, description="Lines of context before and after each match")


class FilesInput(BaseModel):
    pattern: str = Field(description="Glob matched against paths relative to directory; ** spans directories")
    directory: str = Field(description="Directory to search recursively")
    max_results: int = Field(default=100, ge=1, description="Maximum number of paths")


def _files(directory: Path) -> Iterator[tuple[Path, str]]:
    """(path, relative path) of every regular file below ``directory`` that stays inside it."""
    real_dir = os.path.realpath(directory)
    for current, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in sorted(files):
            path = Path(current, name)
            if path.is_symlink() and not path_within(os.path.realpath(path), real_dir):
                continue
            yield path, path.relative_to(directory).as_posix()


def _is_binary(path: Path) -> bool:
    with path.open("rb") as f:
        return b"\0" in f.read(8192)


def _search_content(directory: Path, regex: re.Pattern[str], max_results: int, context: int) -> str:
    results: list[dict[str, object]] = []
    budget = CONTENT_CAP
    for path, rel in _files(directory):
        try:
            if _is_binary(path):
                continue
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for i, line in enumerate(lines):
            if not regex.search(line):
                continue
            entry: dict[str, object] = {"path": rel, "line": i + 1, "content": line[:budget]}
            if context:
                entry["context"] = lines[max(0, i - context) : i + context + 1]
            budget -= len(line)
            results.append(entry)
            if len(results) >= max_results or budget <= 0:
                return json.dumps(results)
    return json.dumps(results)


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Translate a glob where ``**`` spans directories, ``*``/``?`` stay within one segment."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _search_files(directory: Path, pattern: str, max_results: int) -> str:
    regex = glob_regex(pattern)
    by_name = "/" not in pattern
    found: list[str] = []
    for _, rel in _files(directory):
        if regex.match(rel) or (by_name and regex.match(rel.rsplit("/", 1)[-1])):
            found.append(rel)
            if len(found) >= max_results:
                break
    return json.dumps(found)


async def _directory(perms: Permissions, tool: str, raw: str) -> Path:
    path = await perms.check_path(tool, raw)
    if not await asyncio.to_thread(path.is_dir):
        raise ToolError(f"{tool}: not a directory: {path}", tool=tool)
    return path


def search_toolbox(perms: Permissions, *, root: Path | None = None) -> ToolBox:
    """The ``search`` toolbox (group ``fs``); relative directories resolve against ``perms.root``."""

    async def content(inp: ContentInput) -> str:
        try:
            regex = re.compile(inp.pattern)
        except re.error as exc:
            raise ToolError(f"search_content: invalid pattern: {exc}", tool="search_content") from exc
        directory = await _directory(perms, "search_content", inp.directory)
        return await asyncio.to_thread(_search_content, directory, regex, inp.max_results, inp.context_lines)

    async def files(inp: FilesInput) -> str:
        directory = await _directory(perms, "search_files", inp.directory)
        return await asyncio.to_thread(_search_files, directory, inp.pattern, inp.max_results)

    return ToolBox(
        [
            tool_from_model(
                "search_content",
                "Search file contents under a directory for a regular expression. Returns JSON "
                "[{path, line, content, context?}]; binary files are skipped.",
                ContentInput,
                content,
                group="fs",
                retry_on_crash=True,
            ),
            tool_from_model(
                "search_files",
                "Find files under a directory whose relative path matches a glob (** spans "
                "directories). Returns a JSON array of relative paths.",
                FilesInput,
                files,
                group="fs",
                retry_on_crash=True,
            ),
        ],
        name="search",
    )
