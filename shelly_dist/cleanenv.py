"""Keep the process's secrets out of its initial environment block, where any program it starts
could read them (DESIGN §3 rule 16).

Tools start programs with a minimal environment (:func:`~shelly_dist.tools.builtin._process.program_env`),
but on Linux a program can still read its parent's *initial* environment in
``/proc/<ppid>/environ``: the block the kernel copied at ``exec``, which changing ``os.environ``
never rewrites. So :func:`reexec_without_secrets`, the first thing the ``shelly`` command does,
replaces the process (same pid, same arguments, same open files) with itself started on a clean
environment: only the names Python and the dynamic loader need at start-up (:func:`kept`) stay
in the block; every other variable (provider keys, ``redis://:PASSWORD@…`` URLs, anything
unknown) travels through an anonymous in-memory file, is read back into ``os.environ`` at once
and the file closed. ``os.environ`` then holds everything, so ``${VAR}`` config expansion and
libraries reading the environment work as before, while ``/proc/<pid>/environ`` of ``shelly run``,
``shelly worker`` and the worker's forked pool processes shows no secret.

Outside Linux (no ``/proc``, no ``memfd_create``) nothing is done.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping

MARK = "SHELLY_ENV_MOVED"
"""Set in the clean block to ``<pid>:<fd>``: the re-executed process reads its variables from
``fd``. The pid tells a process that inherited the mark (a ``shelly`` it started) from the one it
was meant for."""

KEPT_NAMES = frozenset({
    "PATH", "HOME", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL", "PWD",
    "HOSTNAME", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "VIRTUAL_ENV", "LD_LIBRARY_PATH",
    "LD_PRELOAD", "SSL_CERT_FILE", "SSL_CERT_DIR",
})  # fmt: skip
"""Variables left in the initial block: what the interpreter and the loader read before any of
this code runs, and nothing that carries a credential."""

KEPT_PREFIXES = ("LC_", "PYTHON", "COVERAGE_", "COV_CORE_")


def kept(name: str) -> bool:
    """Whether ``name`` stays in the initial environment block."""
    return name in KEPT_NAMES or name.startswith(KEPT_PREFIXES)


def _restore(mark: str, environ: Mapping[str, str]) -> bool:
    """Read the moved variables back when ``mark`` is this process's; True when it was."""
    pid, _, fd = mark.partition(":")
    if pid != str(os.getpid()) or not fd.isdigit():
        return False
    with os.fdopen(int(fd), "rb") as f:
        moved = json.loads(f.read())
    os.environ.pop(MARK, None)
    for name, value in moved.items():
        os.environ.setdefault(name, value)
    return True


def reexec_without_secrets() -> None:
    """Re-execute this process on a clean environment block, its other variables moved into
    ``os.environ`` (see the module docstring). Returns normally in the re-executed process, or at
    once when there is nothing to move or no way to move it."""
    mark = os.environ.get(MARK, "")
    if mark and _restore(mark, os.environ):
        return
    if not sys.platform.startswith("linux") or not hasattr(os, "memfd_create"):
        return
    moved = {name: value for name, value in os.environ.items() if not kept(name) and name != MARK}
    if not moved:
        return
    fd = os.memfd_create("shelly-env", 0)  # no MFD_CLOEXEC: the new image reads it
    try:
        data = memoryview(json.dumps(moved).encode())
        while data:
            data = data[os.write(fd, data):]
        os.lseek(fd, 0, os.SEEK_SET)
        clean = {name: value for name, value in os.environ.items() if kept(name)}
        clean[MARK] = f"{os.getpid()}:{fd}"
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], clean)
    except OSError:  # cannot re-execute (a sandbox forbids it): run on, as before
        os.close(fd)
