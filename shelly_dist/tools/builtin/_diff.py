"""Unified diffs that cannot stall a worker: off the event loop, bounded in size and in time.

Three tiers, by input size (measured worst cases in the comments of the constants):

- both texts within :data:`INLINE_LINES` lines: computed in a thread (difflib's worst case seen
  at this size: ~10 ms; pure Python yields the GIL every 5 ms, so the loop keeps running);
- up to :data:`MAX_INPUT` characters: computed in a program of its own
  (:mod:`~shelly_dist.tools.builtin._unified`) killed at :data:`DIFF_TIMEOUT`, its output cut at
  :data:`OUTPUT_CAP`;
- beyond that, or past the deadline: a one-line summary instead of the diff.

The diff is what a user approves a change from (``Permissions.confirm_change``) and what
``fs_diff`` returns; a summary says so and why, and is never empty when the texts differ.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from shelly_dist.tools.builtin import _unified
from shelly_dist.tools.builtin._process import ProgramTimedOut, program_env, run_program

INLINE_LINES = 2_000
MAX_INPUT = 8 << 20
"""Characters of old plus new text beyond which no diff is attempted."""
DIFF_TIMEOUT = 10.0
OUTPUT_CAP = 1 << 20


def _size(text: str) -> str:
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    return f"{lines} lines, {len(text):,} characters"


def summary(old: str, new: str, a: str, b: str, why: str) -> str:
    """What is shown instead of a diff: both sides' sizes and the reason."""
    return f"--- {a}\n+++ {b}\n[diff not shown: {why}; {_size(old)} -> {_size(new)}]\n"


async def bounded_diff(tool: str, old: str, new: str, *, a: str, b: str, time_limit: float = DIFF_TIMEOUT) -> str:
    """The unified diff of ``old`` and ``new`` (empty when equal), or a summary when it is too
    large to compute or did not finish within ``time_limit`` seconds."""
    if old == new:
        return ""
    if len(old) + len(new) > MAX_INPUT:
        return summary(old, new, a, b, f"over {MAX_INPUT >> 20} MB")
    if old.count("\n") <= INLINE_LINES and new.count("\n") <= INLINE_LINES:
        return await asyncio.to_thread(_unified.unified_diff, old, new, a, b)
    request = json.dumps({"old": old, "new": new, "a": a, "b": b}).encode()
    try:
        program = Path(_unified.__file__)
        done = await run_program(tool, [sys.executable, "-I", "-S", str(program)], cwd=program.parent,
                                 time_limit=time_limit, env=program_env(), cap=OUTPUT_CAP, stdin=request, reaped=False)
    except ProgramTimedOut:
        return summary(old, new, a, b, f"not computed within {time_limit:g}s")
    if done.returncode != 0:
        return summary(old, new, a, b, f"the diff failed: {done.stderr.strip()[-200:]}")
    return done.stdout

