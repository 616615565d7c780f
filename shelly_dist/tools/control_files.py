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
- the Python environment running shelly (:func:`python_environment`: site-packages, where a
  planted ``.pth`` runs at every start, the standard library, the scripts directory);
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

import functools
import os
import site
import sys
import sysconfig
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

STARTING_DIRECTORY_FILES: dict[str, str] = {
    ".env": "a .env: shelly loads the one in the directory it is started in",
    "shelly.yaml": "a legacy config: shelly loads the one in the directory it is started in",
    ".shelly": "a .shelly directory: shelly takes its config from the one in the directory it is started in",
}
"""Control files by name in *every* directory of the project: ``shelly`` looks for ``.env``,
``.shelly/config.yaml`` and ``shelly.yaml`` in the directory it is started in, which may be any
(a person who changes into ``docs/`` and starts the chat there runs what ``docs/.shelly/`` says)."""


def starting_directory_file(relative: Iterable[str]) -> str:
    """What a path inside the project is to shelly by the names of its parts (relative to the
    project directory): a ``.env`` or ``shelly.yaml`` in any directory, or anything in a ``.shelly``
    directory; "" when none."""
    parts = [part.casefold() for part in relative]
    if parts[:1] == [".shelly"]:  # the project's own: guarded by Permissions.protected, with its carve-outs
        return ""
    if ".shelly" in parts:
        return STARTING_DIRECTORY_FILES[".shelly"]
    return STARTING_DIRECTORY_FILES.get(parts[-1], "") if parts else ""


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


PYTHON_ENVIRONMENT = "the Python environment shelly runs from (a .pth or module planted there runs at every start)"


@functools.cache
def python_environment() -> tuple[Path, ...]:
    """Where the interpreter running shelly finds its code: the standard library, site-packages
    (a ``.pth`` file there is executed at every interpreter start), the user's site-packages, the
    scripts directory (``shelly`` itself) and a virtual environment's ``pyvenv.cfg``. A project's
    ``.venv`` is inside the project, where the filesystem tools can reach it. Computed once per
    process; the ``shelly_dist`` source of an editable install is not among them (agents may
    work on shelly itself)."""
    names = ("stdlib", "platstdlib", "purelib", "platlib", "scripts")
    paths = {sysconfig.get_paths().get(name) for name in names}
    paths |= set(site.getsitepackages()) if hasattr(site, "getsitepackages") else set()
    if site.ENABLE_USER_SITE:
        paths.add(site.getusersitepackages())
    paths.add(os.path.join(sys.prefix, "pyvenv.cfg"))
    return tuple(Path(p) for p in sorted(p for p in paths if p))
