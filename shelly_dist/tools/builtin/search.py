"""The ``search`` toolbox: ``search_content`` (regex over file contents) and ``search_files`` (glob).

Both gate on directory approval like the filesystem tools (group ``fs``) and walk as they do:
from the checked real path, by descriptors, opening each file before checking where it really is
(:func:`~shelly_dist.tools.builtin._grep.files`). A symlinked directory is never followed and a
file that turns out to be outside the searched directory is closed unread, so a symlink — even
one swapped in after a check — cannot smuggle an unapproved file into the results. Binary files (a NUL byte in the first
8 KB) and non-regular files (FIFOs, devices) are skipped.

A search cannot stall the worker: it runs in a process of its own
(:mod:`~shelly_dist.tools.builtin._grep`; ``re`` holds the GIL for a whole match, so a thread would
freeze the event loop) that is killed, with everything it started, at :data:`SEARCH_TIMEOUT`. A
glob is a regular expression too, and ``*a*a*a*a*a*a*b`` against a 60-character name takes 5 s.
Files are streamed, ``context_lines`` is at most :data:`MAX_CONTEXT`, every line is cut at
2,000 characters and the result stops growing at 1 MB of JSON. At most :data:`MAX_SEARCHES`
search processes run at once per event loop (a worker process runs one): a model asking for a
hundred searches in one turn queues them instead of forking a hundred processes.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import weakref
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
"""Seconds a search may take before its process is killed."""
MAX_PATTERN = 10_000
MAX_SEARCHES = 4
"""Search processes one event loop runs at once; more wait for a turn."""

_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def _turn() -> asyncio.Semaphore:
    """This loop's search turns (a semaphore is bound to one loop; embedded tests run several)."""
    loop = asyncio.get_running_loop()
    turns = _turns.get(loop)
    if turns is None:
        turns = _turns[loop] = asyncio.Semaphore(MAX_SEARCHES)
    return turns


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


async def _run_search(tool: str, directory: Path, request: dict[str, object], time_limit: float) -> str:
    """Run one search in a :mod:`_grep` process; its output (JSON) is the result."""
    argv = [sys.executable, "-I", "-S", _grep.__file__, json.dumps({"directory": str(directory), **request})]
    try:
        async with _turn():
            done = await run_program(tool, argv, cwd=directory, time_limit=time_limit, env=program_env(),
                                     cap=4 * CONTENT_CAP, reaped=False)
    except ProgramTimedOut as exc:
        raise ToolError(
            f"{tool}: timed out after {time_limit:g}s; a pattern with nested or repeated wildcards such "
            "as (a+)+ or *a*a*a*b can take exponential time, or the directory is too large: simplify "
            "the pattern or narrow the directory",
            tool=tool,
        ) from exc
    if done.returncode != 0:
        raise ToolError(done.stderr.strip() or f"{tool}: search failed (exit status {done.returncode})", tool=tool)
    return done.stdout


async def _directory(perms: Permissions, tool: str, raw: str) -> Path:
    path = await perms.check_real(tool, raw, change=False)  # the walk starts from the real path
    if not await run_blocking(tool, path.is_dir):
        raise ToolError(f"{tool}: not a directory: {path}", tool=tool)
    return path


def search_toolbox(perms: Permissions, *, root: Path | None = None, timeout: float = SEARCH_TIMEOUT) -> ToolBox:
    """The ``search`` toolbox (group ``fs``); relative directories resolve against ``perms.root``;
    a search is killed after ``timeout`` seconds."""

    async def content(inp: ContentInput) -> str:
        try:
            re.compile(inp.pattern)
        except re.error as exc:
            raise ToolError(f"search_content: invalid pattern: {exc}", tool="search_content") from exc
        directory = await _directory(perms, "search_content", inp.directory)
        request = {"pattern": inp.pattern, "max_results": inp.max_results, "context": inp.context_lines,
                   "cap": CONTENT_CAP}
        return await _run_search("search_content", directory, request, timeout)

    async def files(inp: FilesInput) -> str:
        directory = await _directory(perms, "search_files", inp.directory)
        request = {"glob": inp.pattern, "max_results": inp.max_results, "cap": CONTENT_CAP}
        return await _run_search("search_files", directory, request, timeout)

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
