"""The ``search`` toolbox: ``search_content`` (regex over file contents) and ``search_files`` (glob).

Both gate on directory approval like the filesystem tools (group ``fs``). The walk never follows
a symlinked directory and skips any file whose resolved path leaves the searched directory, so a
symlink cannot smuggle an unapproved file into the results. Binary files (a NUL byte in the first
8 KB) and non-regular files (FIFOs, devices) are skipped.

``search_content`` cannot stall the worker: the regex runs in a process of its own
(:mod:`~shelly_dist.tools.builtin._grep`; ``re`` holds the GIL for a whole match, so a thread would
freeze the event loop) that is killed, with everything it started, at :data:`SEARCH_TIMEOUT`.
Files are streamed, ``context_lines`` is at most :data:`MAX_CONTEXT`, every line is cut at
2,000 characters and the result stops growing at 1 MB of JSON.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from pydantic import BaseModel, Field

from shelly_dist.errors import ToolError
from shelly_dist.tools.blocking import run_blocking
from shelly_dist.tools.builtin import _grep
from shelly_dist.tools.builtin._process import ProgramTimedOut, program_env, run_program
from shelly_dist.tools.permissions import Permissions
from shelly_dist.tools.tool import tool_from_model
from shelly_dist.tools.toolbox import ToolBox

CONTENT_CAP = 1 << 20
"""The result (JSON) stops growing past 1 MB."""
MAX_CONTEXT = 20
SEARCH_TIMEOUT = 30.0
"""Seconds a ``search_content`` call may take before its process is killed."""
MAX_PATTERN = 10_000


class ContentInput(BaseModel):
    pattern: str = Field(max_length=MAX_PATTERN, description="Regular expression to search for (Python re syntax)")
    directory: str = Field(description="Directory to search recursively")
    max_results: int = Field(default=100, ge=1, description="Maximum number of matches")
    context_lines: int = Field(
        default=0, ge=0, le=MAX_CONTEXT,
        description=f"Lines of context before and after each match (at most {MAX_CONTEXT})",
    )


class FilesInput(BaseModel):
    pattern: str = Field(description="Glob matched against paths relative to directory; ** spans directories")
    directory: str = Field(description="Directory to search recursively")
    max_results: int = Field(default=100, ge=1, description="Maximum number of paths")


async def _search_content(directory: Path, inp: ContentInput, time_limit: float) -> str:
    """Run the search in a :mod:`_grep` process; its output is the result."""
    request = json.dumps({"pattern": inp.pattern, "directory": str(directory), "max_results": inp.max_results,
                          "context": inp.context_lines, "cap": CONTENT_CAP})
    try:
        done = await run_program("search_content", [sys.executable, "-I", "-S", _grep.__file__, request],
                                 cwd=directory, time_limit=time_limit, env=program_env(), cap=4 * CONTENT_CAP)
    except ProgramTimedOut as exc:
        raise ToolError(
            f"search_content: timed out after {time_limit:g}s; a pattern with nested repetition such as "
            "(a+)+ can take exponential time, or the directory is too large: simplify the pattern or "
            "narrow the directory",
            tool="search_content",
        ) from exc
    if done.returncode != 0:
        reason = done.stderr.strip() or f"search_content: search failed (exit status {done.returncode})"
        raise ToolError(reason, tool="search_content")
    return done.stdout


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
    for _, rel in _grep.files(directory):
        if regex.match(rel) or (by_name and regex.match(rel.rsplit("/", 1)[-1])):
            found.append(rel)
            if len(found) >= max_results:
                break
    return json.dumps(found)


async def _directory(perms: Permissions, tool: str, raw: str) -> Path:
    path = await perms.check_path(tool, raw)
    if not await run_blocking(tool, path.is_dir):
        raise ToolError(f"{tool}: not a directory: {path}", tool=tool)
    return path


def search_toolbox(perms: Permissions, *, root: Path | None = None, timeout: float = SEARCH_TIMEOUT) -> ToolBox:
    """The ``search`` toolbox (group ``fs``); relative directories resolve against ``perms.root``;
    a ``search_content`` call is killed after ``timeout`` seconds."""

    async def content(inp: ContentInput) -> str:
        try:
            re.compile(inp.pattern)
        except re.error as exc:
            raise ToolError(f"search_content: invalid pattern: {exc}", tool="search_content") from exc
        directory = await _directory(perms, "search_content", inp.directory)
        return await _search_content(directory, inp, timeout)

    async def files(inp: FilesInput) -> str:
        directory = await _directory(perms, "search_files", inp.directory)
        return await run_blocking("search_files", _search_files, directory, inp.pattern, inp.max_results)

    return ToolBox(
        [
            tool_from_model(
                "search_content",
                "Search file contents under a directory for a regular expression. Returns JSON "
                "[{path, line, content, context?}]; binary files are skipped, lines are cut at 2,000 "
                "characters and the result at 1 MB.",
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
