"""Control files: every file ``shelly`` reads to decide what to run or whom to trust (DESIGN §3
rule 16), in one list per process.

An agent that could write one of them would choose what the next ``shelly`` start runs, with the
secrets in its environment: a ``.env`` naming another config (``SHELLY_CONFIG``) or state
directory, a config planting an MCP server, a ``python:`` module, a workflow's ``setup:``, a
prompt file that goes into every system prompt. So the tools that write, move, delete or link
files (:meth:`~shelly_dist.tools.permissions.Permissions.check_real`) consult this list:

- fixed names in the project directory (:func:`project_files`): ``.env``, the legacy config
  ``shelly.yaml``, the prompt files ``CLAUDE.md``, ``AGENTS.md``, ``.cursorrules`` and
  ``.cursor/rules/``;
- and whatever this process actually loaded, registered by its loader as it reads it
  (:func:`register`): the ``.env`` or ``--env-file`` read at start, the config wherever it came
  from (``--config``, ``$SHELLY_CONFIG``, ``.shelly/config.yaml``, ``./shelly.yaml``), the
  modules of ``python:`` with their packages, the workflow file in use.

``.shelly/`` itself (config, skills, ``*.md`` prompt files), the state directory, the permission
store and ``.git/`` are guarded by :class:`~shelly_dist.tools.permissions.Permissions` directly,
whatever anyone answers; the files listed here are refused headless too, and on a terminal a
change needs the person's explicit yes to a question naming the file as a control file.

The list only grows, and lives as long as the process: a file read at start stays a control file
for every tool call after it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path

PROMPT_FILES = ("CLAUDE.md", "AGENTS.md", ".cursorrules", os.path.join(".cursor", "rules"))
"""Prompt files in the project directory: their text goes into every agent's system prompt."""

PROJECT_FILES: dict[str, str] = {
    ".env": "the environment file shelly loads at start",
    "shelly.yaml": "the legacy config file",
    **{name: "a prompt file, read into every system prompt" for name in PROMPT_FILES},
}
"""Control files by their name in the project directory, each with what it is to shelly."""

_lock = threading.Lock()
_registered: dict[str, str] = {}


def _norm(path: str | os.PathLike[str]) -> str:
    return os.path.normpath(os.path.abspath(os.fspath(path)))


def register(path: str | os.PathLike[str], what: str) -> None:
    """Add ``path`` (a file or a directory, which then covers everything below it) to this
    process's control files; ``what`` says what it is to shelly ("the config file")."""
    with _lock:
        for form in dict.fromkeys((_norm(path), os.path.realpath(path))):
            _registered.setdefault(form, what)


def register_all(paths: Iterable[str | os.PathLike[str]], what: str) -> None:
    for path in paths:
        register(path, what)


def registered() -> dict[str, str]:
    """Every control file registered so far (absolute path, lexical and resolved forms) → what it is."""
    with _lock:
        return dict(_registered)


def project_files(root: str | os.PathLike[str]) -> list[tuple[Path, str]]:
    """The control files named by :data:`PROJECT_FILES` in the project directory ``root``
    (whether they exist yet or not: creating one is as dangerous as changing it)."""
    base = Path(root)
    return [(base / name, what) for name, what in PROJECT_FILES.items()]
