"""A tiny ``.env`` reader: ``KEY=VALUE`` lines, loaded before anything else (Shelly's CLI does).

Supported: blank lines, ``#`` comments, an optional ``export`` prefix, values in single or double
quotes (double quotes understand ``\\n``), and inline `` #`` comments after unquoted values.
Variables already in the environment win, so a real ``export`` always overrides the file. No new
dependency for a twenty-line format.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path


def parse_dotenv(text: str) -> dict[str, str]:
    """The variables ``text`` defines, in order; malformed lines are skipped."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key.replace("_", "").isalnum():
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            quote, value = value[0], value[1:-1]
            if quote == '"':
                value = value.replace("\\n", "\n").replace('\\"', '"')
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        out[key] = value
    return out


def load_dotenv(path: str | os.PathLike[str] = ".env", env: MutableMapping[str, str] | None = None) -> int:
    """Set the file's variables that ``env`` (default ``os.environ``) lacks; how many were set."""
    env = os.environ if env is None else env
    p = Path(path)
    if not p.is_file():
        return 0
    count = 0
    for key, value in parse_dotenv(p.read_text(encoding="utf-8", errors="replace")).items():
        if key not in env:
            env[key] = value
            count += 1
    return count
