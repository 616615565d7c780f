"""Unified diffs, as a function and as a program: ``python -I -S _unified.py`` reads
``{"old", "new", "a", "b"}`` as JSON on stdin and writes the diff to stdout.

``difflib`` is pure Python and, on some inputs, far worse than linear (32,000 short lines of a
few hundred distinct values: 2.5 s; a 1.3 MB file: 32 s). Run as a program, a diff can be killed
at a deadline (:func:`shelly_dist.tools.builtin._diff.bounded_diff`); the module imports only the
standard library so the program starts in ~25 ms.
"""

from __future__ import annotations

import difflib
import json
import sys


def unified_diff(old: str, new: str, a: str, b: str) -> str:
    """The unified diff of two texts, every line ending in a newline."""
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), a, b)
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


if __name__ == "__main__":
    request = json.load(sys.stdin)
    sys.stdout.write(unified_diff(request["old"], request["new"], request["a"], request["b"]))
